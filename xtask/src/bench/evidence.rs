//! `make bench-evidence`: what the evidence commands cost when the ledger is large. N postings
//! spread over P accounting periods are loaded straight into a deployment's DynamoDB ledger
//! (BatchWriteItem, the items `Ledger::commit` writes, period index included); then `dlqctl
//! reconcile` runs as its own process for one period and for the whole history, with the ledger
//! read in one segment and in several at once, and `dlqctl evidence export` for one period. Each
//! is timed, and its peak resident memory is read from the kernel (its `VmHWM`, see `measure`).
//!
//! Then the audit trail: A duplicate records (each another SQS message carrying a loaded
//! posting's transaction, with its period) linked into its chains (each writer on a chain of its
//! own, 25 records a transaction) with S seals spread evenly over them; `dlqctl audit verify` run
//! in full, from the seal before the last (one seal interval), from the last seal and from the
//! bucket alone (the records each seal wrote beside it; then `evidence export --from-bucket`); and the
//! period reconciled and exported again, its duplicates now counted and its bundle carrying the
//! whole trail. With `--baseline-dlqctl`, another build's `dlqctl` (an earlier commit's)
//! reconciles and exports the period too, in the same run over the same records, beside this one.
//!
//! Figures, not assertions: the run fails only when a command fails or reconciles a number of
//! postings other than the number loaded into its scope.
//!
//!     cargo xtask bench evidence --dlqctl PATH [--postings N] [--periods P] [--writers W]
//!                                [--audit-records A] [--seals S] [--baseline-dlqctl PATH]
//!              (defaults 1000000, 12, 8, 100000, 10, none)

use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use recon_aws::dynamodb::{DynamoAuditLog, posting_item};
use recon_aws::s3::S3Worm;

use recon_core::domain::{AuditKind, AuditRecord, Posting};
use recon_core::ports::AuditLog;
use recon_harness::stack::TestStack;
use recon_testkit::conformance::posting;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// DynamoDB's largest batch write.
const BATCH: usize = 25;

/// The period of posting `n`: one of `periods` months from 2025-01.
fn period_of(n: u32, periods: u32) -> String {
    let month = n % periods;
    format!("{}-{:02}", 2025 + month / 12, month % 12 + 1)
}

/// Posting `n` of the load: in its period, with its own hash and SQS message.
fn nth(n: u32, periods: u32) -> Posting {
    let mut p = posting("bench-evidence", n, &format!("sqs-{n}"));
    p.period = period_of(n, periods);
    p.value_date = chrono::NaiveDate::parse_from_str(&format!("{}-15", p.period), "%Y-%m-%d").unwrap_or_default();
    p
}

/// Write every `stride`-th posting of `first..count`, 25 at a time, retrying what
/// DynamoDB hands back unprocessed.
async fn load_part(s: &TestStack, first: u32, count: u32, stride: u32, periods: u32) -> Result<u64, String> {
    let mut written = 0u64;
    let started = Instant::now();
    let numbers: Vec<u32> = (first..count).step_by(stride as usize).collect();
    for chunk in numbers.chunks(BATCH) {
        let mut requests = chunk
            .iter()
            .map(|&n| {
                let item = posting_item(&nth(n, periods)).map_err(|e| e.to_string())?;
                let put = PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map_err(|e| e.to_string())?;
                Ok(WriteRequest::builder().put_request(put).build())
            })
            .collect::<Result<Vec<_>, String>>()?;
        while !requests.is_empty() {
            let out = s
                .clients
                .dynamodb
                .batch_write_item()
                .request_items(&s.stack.names.ledger_table, requests.clone())
                .send()
                .await
                .map_err(|e| format!("BatchWriteItem: {e:?}"))?;
            let left = out
                .unprocessed_items
                .and_then(|mut m| m.remove(&s.stack.names.ledger_table))
                .unwrap_or_default();
            written += (requests.len() - left.len()) as u64;
            requests = left;
        }
        // The first writer tells how far the load is (each writer has an equal share).
        if first == 0 && written % 10_000 < BATCH as u64 {
            eprintln!(
                "  loading: ~{} of {count} in {:.0} s",
                written * u64::from(stride),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(written)
}

/// Where the audit records go: the ledger they name (`postings` over `periods`), and the period
/// a reconciliation is measured on.
#[derive(Clone, Copy)]
struct Trail {
    postings: u32,
    periods: u32,
}

/// Duplicate record `n`, as the consumer writes it: another SQS message carrying the
/// transaction of posting `n mod postings` (its hash, message id and period).
fn duplicate(n: u64, t: Trail, now: chrono::DateTime<chrono::Utc>) -> AuditRecord {
    let sqs = format!("bench-dup-{n}");
    let of = nth(u32::try_from(n % u64::from(t.postings.max(1))).unwrap_or(0), t.periods);
    let mut r = AuditRecord::system(AuditKind::DuplicateSuppressed, &sqs, now, "bench", String::new());
    r.sqs_message_id = sqs;
    r.message_id = Some(of.message_id);
    r.source_hash = Some(of.source_hash);
    r.currency = Some(of.currency);
    r.amount = Some(of.amount.to_string());
    r.ledger_entity = Some(of.ledger_entity);
    r.period = Some(of.period);
    r
}

/// How many writers load the trail at once (each settles on a chain of its own).
const WRITERS: u8 = 8;

/// `count` records of writer `writer` (ids of its own), written 25 to a transaction; the next
/// `n`, and how many of them are of the measured period (the first).
async fn audit_part(log: &DynamoAuditLog, writer: u8, from: u64, count: u64, t: Trail) -> Result<(u64, u64), String> {
    let wanted = format!("writer {writer}");
    let now = chrono::Utc::now();
    let first = period_of(0, t.periods);
    let ids = u64::from(WRITERS);
    let records: Vec<_> = (from..from + count)
        .map(|n| duplicate(n * ids + u64::from(writer), t, now))
        .collect();
    let n = from + count;
    let in_first = records
        .iter()
        .filter(|r| r.period.as_deref() == Some(first.as_str()))
        .count() as u64;
    for batch in records.chunks(25) {
        let linked = log.append_many(batch).await.map_err(|e| e.to_string())?;
        if linked.iter().any(Option::is_none) {
            return Err(format!(
                "chain {wanted}: a new record was taken for one already recorded"
            ));
        }
    }
    Ok((n, in_first))
}

/// `total` records over the chains in `seals` rounds, a seal after each; how many are of the
/// measured period.
async fn load_audit(s: &TestStack, total: u64, seals: u64, t: Trail) -> Result<u64, String> {
    let log = DynamoAuditLog::new(s.clients.dynamodb.clone(), &s.settings.audit_table);
    let worm = S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket());
    let chains = u64::from(WRITERS);
    let per_round = total / seals / chains;
    let started = Instant::now();
    let mut next = vec![0u64; usize::from(WRITERS)];
    let mut in_first = 0;
    for round in 0..seals {
        let parts = (0..WRITERS).map(|c| audit_part(&log, c, next[usize::from(c)], per_round, t));
        for (c, r) in futures::future::join_all(parts).await.into_iter().enumerate() {
            let (n, first) = r?;
            next[c] = n;
            in_first += first;
        }
        recon_core::evidence::seal(&log, &worm, chrono::Utc::now())
            .await
            .map_err(|e| e.to_string())?;
        eprintln!(
            "  audit: {} records, {} seals in {:.0} s",
            (round + 1) * per_round * chains,
            round + 1,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(in_first)
}

/// A table's header: the command, what it counts, the count per second, wall time, memory.
fn header(command: &str, counted: &str, rate: &str) {
    println!(
        "\n{command:<44} {counted:>9} {:>9} {rate:>11} {:>10}",
        "wall s", "peak MiB"
    );
}

/// A `dlqctl` command line with the deployment's prefix, given the arguments after it.
type Dlqctl<'a> = &'a dyn Fn(&[&str]) -> Command;

/// `dlqctl audit verify` in full, then continued from the seal before the newest (one seal
/// interval) and from the newest: records read, time, peak memory. Each must verify intact.
fn verify_runs(dlq: Dlqctl<'_>, total: u64) -> Result<(), String> {
    header("command", "records", "records/s");
    let run_with = |dlq: Dlqctl<'_>, name: &str, args: &[&str]| -> Result<serde_json::Value, String> {
        let (wall, peak, out) = measure(&mut dlq(&[&["--json", "audit", "verify"][..], args].concat()))?;
        let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("verify's JSON: {e}: {out}"))?;
        let read = v["records"].as_u64().unwrap_or(0);
        println!(
            "{name:<44} {read:>9} {wall:>9.2} {:>11.0} {peak:>10.1}",
            read as f64 / wall.max(1e-9)
        );
        Ok(v)
    };
    let run = |name: &str, args: &[&str]| run_with(dlq, name, args);
    let whole = run("audit verify (whole trail)", &[])?;
    if whole["records"].as_u64() != Some(total) {
        return Err(format!(
            "the whole trail verified {} records, {total} written",
            whole["records"]
        ));
    }
    let newest = whole["latest_seal_seq"].as_u64().ok_or("verify named no newest seal")?;
    for from in [newest.saturating_sub(1).max(1), newest] {
        let from = from.to_string();
        run(&format!("audit verify --from-seal {from}"), &["--from-seal", &from])?;
    }
    // The same trail from the bucket alone: the records each seal wrote beside it.
    let alone = run("audit verify --from-bucket (no table)", &["--from-bucket"])?;
    if alone["records"] != whole["records"] || alone["latest_seal_seq"] != whole["latest_seal_seq"] {
        return Err(format!(
            "the bucket alone verified {} records to seal {}, the table {} to seal {}",
            alone["records"], alone["latest_seal_seq"], whole["records"], whole["latest_seal_seq"]
        ));
    }
    let out = std::env::temp_dir().join(format!("bench-bucket-bundle-{}.json", std::process::id()));
    let path = out.display().to_string();
    let (wall, peak, printed) = measure(&mut dlq(&[
        "--json",
        "evidence",
        "export",
        "--from-bucket",
        "--out",
        &path,
    ]))?;
    let _ = std::fs::remove_file(&out);
    let v: serde_json::Value = serde_json::from_str(&printed).map_err(|e| format!("export's JSON: {e}: {printed}"))?;
    let written = v["audit_records"].as_u64().unwrap_or(0);
    if Some(written) != whole["records"].as_u64() {
        return Err(format!(
            "export --from-bucket wrote {written} records, {} verified",
            whole["records"]
        ));
    }
    println!(
        "{:<44} {written:>9} {wall:>9.2} {:>11.0} {peak:>10.1}",
        "evidence export --from-bucket",
        written as f64 / wall.max(1e-9)
    );
    Ok(())
}

/// `dlqctl reconcile --period` once the trail holds duplicates of every period: `expected` is
/// the period's committed postings and its duplicates, which it must count exactly.
fn reconcile_run(dlq: Dlqctl<'_>, name: &str, period: &str, expected: (u64, u64)) -> Result<(), String> {
    let (wall, peak, out) = measure(&mut dlq(&["--json", "reconcile", "--period", period]))?;
    let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("reconcile's JSON: {e}: {out}"))?;
    let count = |state: &str| v["by_state"][state]["count"].as_u64().unwrap_or(0);
    let found = (count("COMMITTED"), count("DUPLICATE"));
    if found != expected {
        return Err(format!(
            "{name}: (committed, duplicates) {found:?}, {expected:?} in the period"
        ));
    }
    let outcomes = found.0 + found.1;
    println!(
        "{name:<44} {outcomes:>9} {wall:>9.2} {:>11.0} {peak:>10.1}",
        outcomes as f64 / wall.max(1e-9)
    );
    Ok(())
}

/// `dlqctl evidence export` of one period again, now that the trail is long: the bundle carries
/// every record the export's seal covers, so this is what writing them costs.
fn export_run(
    dlq: Dlqctl<'_>,
    name: &str,
    period: &str,
    transactions: u64,
    path: &std::path::Path,
) -> Result<(), String> {
    let out_path = path.display().to_string();
    let args = ["--json", "evidence", "export", "--period", period, "--out", &out_path];
    let (wall, peak, out) = measure(&mut dlq(&args))?;
    let _ = std::fs::remove_file(path);
    let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("export's JSON: {e}: {out}"))?;
    if v["transactions"].as_u64() != Some(transactions) {
        return Err(format!(
            "{name}: {} transactions, {transactions} in the period",
            v["transactions"]
        ));
    }
    let records = v["audit_records"].as_u64().unwrap_or(0);
    println!(
        "{name:<44} {records:>9} {wall:>9.2} {:>11.0} {peak:>10.1}",
        records as f64 / wall.max(1e-9)
    );
    Ok(())
}

/// A command's wall time (s), peak resident memory (MiB) and standard output.
///
/// The peak is the child's own `VmHWM`, read from `/proc` every 5 ms once it runs its program
/// (its name in `comm`), the last reading before it exits: not `wait4`'s `ru_maxrss`, which
/// Linux floors at the parent's peak (the memory a child had before `exec` counts), so that every
/// command would have shown at least this harness's own peak.
fn measure(cmd: &mut Command) -> Result<(f64, f64, String), String> {
    let program = std::path::Path::new(cmd.get_program())
        .file_name()
        .map(|n| n.to_string_lossy().chars().take(15).collect::<String>())
        .unwrap_or_default();
    let started = Instant::now();
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    let pid = child.id();
    // Read its output while it runs.
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).map(|_| out)
    });
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watching = done.clone();
    let watcher = std::thread::spawn(move || {
        let mut peak_kib = 0u64;
        while !watching.load(std::sync::atomic::Ordering::Relaxed) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim_end() == program {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let hwm = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
                peak_kib = peak_kib.max(hwm.unwrap_or(0));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        peak_kib
    });
    let status = child.wait().map_err(|e| e.to_string());
    let wall = started.elapsed().as_secs_f64();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak_kib = watcher.join().map_err(|_| "watching the memory panicked")?;
    let out = reader
        .join()
        .map_err(|_| "reading the output panicked")?
        .map_err(|e| e.to_string())?;
    if !status?.success() {
        return Err(format!("{cmd:?} failed: {out}"));
    }
    Ok((wall, peak_kib as f64 / 1024.0, out))
}

/// The committed count `dlqctl --json reconcile` reports.
fn committed(json: &str) -> Result<u64, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("reconcile's JSON: {e}: {json}"))?;
    Ok(v["by_state"]["COMMITTED"]["count"].as_u64().unwrap_or(0))
}

pub async fn run(args: EvidenceArgs) {
    if let Err(e) = bench(args).await {
        eprintln!("bench-evidence: FAILED: {e}");
        std::process::exit(1);
    }
}

async fn bench(args: EvidenceArgs) -> Result<(), String> {
    let dlqctl = args.dlqctl;
    let count = args.postings;
    let periods = args.periods.clamp(1, 24);
    let writers = args.writers.max(1);
    let audit_records = args.audit_records;
    let seals = args.seals.max(2);
    let baseline = args.baseline_dlqctl;
    let s = TestStack::new("bench-evidence").await;
    let prefix = s.stack.names.prefix.clone();

    let started = Instant::now();
    let loads = (0..writers).map(|w| load_part(&s, w, count, writers, periods));
    let mut loaded = 0;
    for r in futures::future::join_all(loads).await {
        loaded += r?;
    }
    let load_s = started.elapsed().as_secs_f64();
    println!(
        "loaded {loaded} postings over {periods} periods into DynamoDB Local in {load_s:.0} s ({:.0}/s)",
        loaded as f64 / load_s.max(1e-9)
    );

    let period = period_of(0, periods);
    let in_period = (0..count).filter(|n| n % periods == 0).count() as u64;
    let dir = std::env::temp_dir().join(format!("{prefix}-evidence.json"));
    // A dlqctl build's command line for this deployment, as an auditor (an export asks the
    // control plane for its seal).
    let dlq_of = |bin: &std::path::Path, args: &[&str]| {
        let mut c = Command::new(bin);
        c.args(["--prefix", &prefix]).args(args).env("DLQ_AS", "auditor:bench");
        c
    };
    let dlq = |args: &[&str]| dlq_of(&dlqctl, args);
    header("command", "postings", "postings/s");
    let runs: Vec<(String, Vec<String>, u64, bool)> = vec![
        (
            format!("reconcile --period {period}"),
            vec!["--period".into(), period.clone()],
            in_period,
            true,
        ),
        (
            format!("reconcile --period {period} --segments 1"),
            vec!["--period".into(), period.clone(), "--segments".into(), "1".into()],
            in_period,
            true,
        ),
        ("reconcile (whole history)".into(), vec![], u64::from(count), true),
        (
            "reconcile (whole history) --segments 1".into(),
            vec!["--segments".into(), "1".into()],
            u64::from(count),
            true,
        ),
        (
            format!("evidence export --period {period}"),
            vec![
                "--period".into(),
                period.clone(),
                "--out".into(),
                dir.display().to_string(),
            ],
            in_period,
            false,
        ),
    ];
    for (name, args, expected, is_reconcile) in runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = if is_reconcile {
            dlq(&[&["--json", "reconcile"][..], &args].concat())
        } else {
            dlq(&[&["--json", "evidence", "export"][..], &args].concat())
        };
        let (wall, peak, out) = measure(&mut cmd)?;
        let read = if is_reconcile {
            committed(&out)?
        } else {
            let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("export's JSON: {e}: {out}"))?;
            v["transactions"].as_u64().unwrap_or(0)
        };
        if read != expected {
            return Err(format!("{name}: {read} postings reconciled, {expected} in its scope"));
        }
        println!(
            "{name:<44} {read:>9} {wall:>9.2} {:>11.0} {peak:>10.1}",
            read as f64 / wall.max(1e-9)
        );
    }
    let _ = std::fs::remove_file(&dir);

    // The audit trail, after the ledger: a whole-trail verify against one continued from a seal.
    let audit_records = audit_records / seals / u64::from(WRITERS) * seals * u64::from(WRITERS);
    let trail = Trail {
        postings: count,
        periods,
    };
    let duplicates = load_audit(&s, audit_records, seals, trail).await?;
    let dlq_baseline = |args: &[&str]| dlq_of(baseline.as_deref().unwrap_or(&dlqctl), args);
    let baseline_runs: Option<Dlqctl<'_>> = baseline.as_ref().map(|_| &dlq_baseline as _);
    // (Not the baseline's verify: a build from before records carried their period cannot
    // verify one that does.)
    verify_runs(&dlq, audit_records)?;
    // The period again, its duplicates now among the trail's: each build reads them its way.
    let builds: Vec<(Dlqctl<'_>, &str)> = baseline_runs
        .map(|b| (b, ", baseline"))
        .into_iter()
        .chain([(&dlq as Dlqctl<'_>, "")])
        .collect();
    header("command (the trail loaded)", "outcomes", "outcomes/s");
    for (build, suffix) in &builds {
        reconcile_run(
            *build,
            &format!("reconcile --period {period}{suffix}"),
            &period,
            (in_period, duplicates),
        )?;
    }
    header("command (the trail loaded)", "records", "records/s");
    for (build, suffix) in &builds {
        export_run(
            *build,
            &format!("evidence export --period {period}{suffix}"),
            &period,
            in_period + duplicates,
            &dir,
        )?;
    }
    s.cleanup().await;
    Ok(())
}

/// The flags of `cargo xtask bench evidence`.
#[derive(clap::Args, Clone, Debug)]
pub struct EvidenceArgs {
    /// The dlqctl binary whose commands are timed.
    #[arg(long, default_value = "target/release/dlqctl")]
    pub dlqctl: PathBuf,
    /// Postings loaded.
    #[arg(long, default_value_t = 1_000_000)]
    pub postings: u32,
    /// Accounting periods they are spread over (1-24).
    #[arg(long, default_value_t = 12)]
    pub periods: u32,
    /// Concurrent loaders.
    #[arg(long, default_value_t = 8)]
    pub writers: u32,
    /// Audit records appended.
    #[arg(long, default_value_t = 100_000)]
    pub audit_records: u64,
    /// Seals written over them (at least 2).
    #[arg(long, default_value_t = 10)]
    pub seals: u64,
    /// Another build's dlqctl, to verify the whole trail with beside this one.
    #[arg(long)]
    pub baseline_dlqctl: Option<PathBuf>,
}
