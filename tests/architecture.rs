//! The architecture, enforced (as rust-analyzer enforces its own): what each crate may depend on,
//! what each module of a crate may import, no module cycles, all time in `recon-core` through its
//! clock, and no hand-written module above 600 lines. These tests read `cargo metadata` and the
//! sources; they need no local stack. ARCHITECTURE.md states the same rules in words.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "architecture/file_graph.rs"]
mod file_graph;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the workspace")
        .to_path_buf()
}

/// Package name -> the names of its normal (non-dev, non-build) dependencies, resolved.
fn normal_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(workspace().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let name_of: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect();
    let mut graph = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().into_iter().flatten() {
        let Some(name) = node["id"].as_str().and_then(|id| name_of.get(id)) else {
            continue;
        };
        let deps: BTreeSet<String> = node["deps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|k| k["kind"].is_null())
            })
            .filter_map(|d| {
                d["pkg"]
                    .as_str()
                    .and_then(|id| name_of.get(id))
                    .map(|n| (*n).to_owned())
            })
            .collect();
        graph
            .entry((*name).to_owned())
            .or_insert_with(BTreeSet::new)
            .extend(deps);
    }
    graph
}

/// Everything `root` links, directly or not.
fn closure(graph: &BTreeMap<String, BTreeSet<String>>, root: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_owned()];
    while let Some(p) = todo.pop() {
        for d in graph.get(&p).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

fn is_aws_sdk(crate_name: &str) -> bool {
    [
        "aws-sdk-",
        "aws-smithy-",
        "aws-config",
        "aws-types",
        "aws-runtime",
        "aws-sigv4",
        "aws-credential-types",
    ]
    .iter()
    .any(|p| crate_name.starts_with(p))
}

#[test]
fn core_and_testkit_link_no_aws_sdk_and_nothing_shipped_links_test_code() {
    let graph = normal_dependencies();
    let core = closure(&graph, "recon-core");
    assert!(core.contains("aws_lambda_events"), "core reads Lambda's event types");
    let sdk: Vec<&String> = core.iter().filter(|c| is_aws_sdk(c)).collect();
    assert!(sdk.is_empty(), "recon-core links AWS SDK crates: {sdk:?}");
    for forbidden in [
        "recon-aws",
        "recon-postgres",
        "tokio-postgres",
        "recon-testkit",
        "lambda_runtime",
        "tracing-subscriber",
    ] {
        assert!(!core.contains(forbidden), "recon-core links {forbidden}");
    }
    assert!(
        !closure(&graph, "recon-aws").contains("recon-testkit"),
        "recon-aws links the testkit"
    );
    // The PostgreSQL and HTTP ledgers are adapters of core's ports, beside the AWS adapters,
    // not on them.
    for (adapter, driver) in [("recon-postgres", "tokio-postgres"), ("recon-http", "reqwest")] {
        let linked = closure(&graph, adapter);
        assert!(linked.contains("recon-core") && linked.contains(driver), "{adapter}");
        for forbidden in ["recon-aws", "recon-testkit", "recon-harness"] {
            assert!(!linked.contains(forbidden), "{adapter} links {forbidden}");
        }
        let sdk: Vec<&String> = linked.iter().filter(|c| is_aws_sdk(c)).collect();
        assert!(sdk.is_empty(), "{adapter} links AWS SDK crates: {sdk:?}");
    }
    // What is deployed or handed to an operator links no test code: not the testkit, not the
    // harness, not the developer's tool (the demo and the pump are `cargo xtask`'s).
    for shipped in ["consumer", "enricher", "replay", "reference-audit", "dlqctl"] {
        let linked = closure(&graph, shipped);
        assert!(
            linked.contains("recon-core") && linked.contains("recon-aws"),
            "{shipped} is wired"
        );
        for test_code in ["recon-testkit", "recon-harness", "xtask"] {
            assert!(!linked.contains(test_code), "{shipped} links {test_code}");
        }
    }
    // The tool that does link them is the developer's.
    let xtask = closure(&graph, "xtask");
    assert!(xtask.contains("dlqctl") && xtask.contains("recon-harness"), "{xtask:?}");
}

/// A function package is built by `cargo lambda build --bin <function>` (SAM, `make build`), which
/// resolves features over the workspace's default members: those must be the functions alone, or
/// dlqctl's operator features (SSO and credential_process profiles, env-filter and its regex
/// engine) are compiled into every package, past the 5 MB a package may weigh.
#[test]
fn the_function_packages_are_resolved_without_dlqctls_operator_features() {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "-e", "features", "--prefix", "none", "--manifest-path"])
        .arg(workspace().join("Cargo.toml"))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        tree.contains("aws-config feature \"rt-tokio\"") && tree.lines().any(|l| l.starts_with("consumer v")),
        "the tree of the default members was read:\n{tree}"
    );
    for line in [
        "aws-config feature \"sso\"",
        "aws-config feature \"credentials-process\"",
        "tracing-subscriber feature \"env-filter\"",
    ] {
        assert!(!tree.contains(line), "the functions are built with {line}");
    }
    for krate in ["dlqctl v", "recon-testkit v", "regex v", "webpki-roots v"] {
        assert!(
            !tree.lines().any(|l| l.starts_with(krate)),
            "the functions' build links {krate}"
        );
    }
}

/// `make deploy` builds with SAM, which passes `--release`: the environment it sets gives that
/// profile the settings of `lambda-small` (what `make build` uses and BENCHMARKS.md measures), so
/// the packages deployed are the ones measured. The two must say the same.
#[test]
fn sams_release_build_is_given_the_size_profiles_settings() {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("Cargo.toml");
    let small = manifest
        .split("[profile.lambda-small]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("a lambda-small profile");
    let setting = |key: &str| -> String {
        small
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().strip_prefix('=')))
            .map(|v| v.trim().trim_matches('"').to_owned())
            .unwrap_or_else(|| panic!("lambda-small sets {key}"))
    };
    assert_eq!(setting("inherits "), "release", "nothing else may differ from release");
    let makefile = std::fs::read_to_string(workspace().join("Makefile")).expect("Makefile");
    let env = makefile
        .lines()
        .find_map(|l| l.strip_prefix("SIZE_PROFILE_ENV :="))
        .expect("the Makefile's SIZE_PROFILE_ENV");
    let mut given: Vec<&str> = env.split_whitespace().collect();
    given.sort_unstable();
    let mut wanted = vec![
        format!("CARGO_PROFILE_RELEASE_CODEGEN_UNITS={}", setting("codegen-units ")),
        format!("CARGO_PROFILE_RELEASE_LTO={}", setting("lto ")),
        format!("CARGO_PROFILE_RELEASE_OPT_LEVEL={}", setting("opt-level ")),
    ];
    wanted.sort();
    assert_eq!(given, wanted);
    assert!(
        makefile.contains("$(SIZE_PROFILE_ENV) sam build"),
        "make deploy's sam build gets the environment"
    );
}

/// The source of `file` without comments and without its `#[cfg(test)]` tail.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).expect("source file");
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The top-level module a file of `src` belongs to (`None` for the crate root).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// The first segment of every path after `prefix` (`crate::a::b`, `crate::{a, b::c}`).
fn first_segments(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (j, ch) in group.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        rest = &group[j..];
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphabetic() || c == '_') => {
                        let ident: String = group[j..]
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        out.insert(ident);
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let ident: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !ident.is_empty() {
                out.insert(ident);
            }
        }
    }
    out
}

/// Top-level module -> the top-level modules of the same crate it uses.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = rust_files(src).iter().filter_map(|f| top_module(src, f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        let Some(module) = top_module(src, &file) else { continue };
        let code = code(&file);
        let mut used = first_segments(&code, "crate::");
        // `super::` names a sibling of a top-level file, or the crate root's items from
        // `x/mod.rs`; deeper, it stays inside the module.
        let depth = file.strip_prefix(src).map(|r| r.components().count()).unwrap_or(0);
        let is_mod_rs = file.file_name().is_some_and(|n| n == "mod.rs");
        if depth == 1 || (depth == 2 && is_mod_rs) {
            used.extend(first_segments(&code, "super::"));
        }
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(used.into_iter().filter(|m| modules.contains(m) && *m != module));
    }
    graph
}

fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_owned());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

const CRATE_SOURCES: [&str; 6] = [
    "shared/core/src",
    "shared/aws/src",
    "shared/testkit/src",
    "shared/harness/src",
    "cli/src",
    "xtask/src",
];

#[test]
fn no_crate_has_a_module_cycle() {
    for src in CRATE_SOURCES {
        let graph = module_graph(&workspace().join(src));
        assert!(graph.len() >= 2, "{src}: the modules were found");
        if let Some(c) = cycle(&graph) {
            panic!("{src}: module cycle {}", c.join(" -> "));
        }
    }
}

/// Files, not only top-level modules: no file of a crate reaches itself through the files it
/// takes names from.
#[test]
fn no_crate_has_a_file_cycle() {
    for src in CRATE_SOURCES {
        let graph = file_graph::file_graph(&workspace().join(src));
        assert!(
            graph.values().filter(|to| !to.is_empty()).count() >= 2,
            "{src}: the files' imports were read"
        );
        if let Some(c) = file_graph::file_cycle(&workspace().join(src)) {
            panic!("{src}: file cycle {}", c.join(" -> "));
        }
    }
}

#[test]
fn core_modules_depend_only_downwards() {
    let graph = module_graph(&workspace().join("shared/core/src"));
    // Each layer may use only what is listed (and nothing uses the flows but other flows).
    let allowed: [(&str, &[&str]); 5] = [
        ("domain", &[]),
        ("resources", &[]),
        ("decisions", &["domain"]),
        ("ports", &["domain", "resources"]),
        ("config", &["decisions", "domain", "resources"]),
    ];
    for (module, may_use) in allowed {
        let uses = graph.get(module).cloned().unwrap_or_default();
        let extra: Vec<&String> = uses.iter().filter(|m| !may_use.contains(&m.as_str())).collect();
        assert!(
            extra.is_empty(),
            "core::{module} uses {extra:?}; it may use only {may_use:?}"
        );
    }
    for (module, uses) in &graph {
        assert!(
            !uses.contains("config") || module == "config",
            "the flow {module} reads configuration"
        );
    }
}

#[test]
fn all_time_in_core_goes_through_the_clock() {
    let src = workspace().join("shared/core/src");
    for file in rust_files(&src) {
        if file.ends_with("ports/clock.rs") {
            continue;
        }
        let code = code(&file);
        for direct in ["SystemTime", "Instant", "Utc::now", "tokio::time"] {
            assert!(
                !code.contains(direct),
                "{} reads time directly ({direct}); use the Clock port",
                file.display()
            );
        }
    }
}

#[test]
fn no_hand_written_module_is_above_600_lines() {
    let root = workspace();
    let mut long = Vec::new();
    for dir in ["shared", "functions", "cli", "xtask", "tests"] {
        for file in rust_files(&root.join(dir)) {
            let lines = std::fs::read_to_string(&file).map(|t| t.lines().count()).unwrap_or(0);
            if lines > 600 {
                long.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(long.is_empty(), "split by responsibility: {long:?}");
}

#[test]
fn the_module_graph_reader_sees_imports_and_cycles() {
    // The checks above are only as good as this reader: it must find grouped and nested imports.
    let found = first_segments(
        "use crate::{domain::{a, b}, ports::X};\nlet x = crate::replay::run();",
        "crate::",
    );
    assert_eq!(
        found,
        BTreeSet::from(["domain".into(), "ports".into(), "replay".into()])
    );
    let graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::from([
        ("a".into(), BTreeSet::from(["b".into()])),
        ("b".into(), BTreeSet::from(["c".into()])),
        ("c".into(), BTreeSet::from(["a".into()])),
    ]);
    assert_eq!(cycle(&graph).map(|c| c.len()), Some(4));
    let acyclic: BTreeMap<String, BTreeSet<String>> = BTreeMap::from([("a".into(), BTreeSet::from(["b".into()]))]);
    assert_eq!(cycle(&acyclic), None);
}

/// `1.94.1` -> (1, 94, 1); a missing part is 0.
fn version(v: &str) -> (u64, u64, u64) {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

#[test]
fn the_stated_minimum_rust_version_is_at_least_every_locked_dependencys() {
    // Regression: the workspace said 1.85 while the locked AWS SDK crates need 1.94.1.
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--manifest-path"])
        .arg(workspace().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let packages = meta["packages"].as_array().expect("packages");
    let stated = packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(id)))
        .filter_map(|p| p["rust_version"].as_str())
        .map(version)
        .min()
        .expect("the workspace states a rust-version");
    let needed: Vec<String> = packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| !members.contains(id)))
        .filter_map(|p| {
            let v = p["rust_version"].as_str()?;
            (version(v) > stated).then(|| format!("{} {} needs {v}", p["name"], p["version"]))
        })
        .collect();
    assert!(
        needed.is_empty(),
        "rust-version {stated:?} is below what locked dependencies need: {needed:?}"
    );
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README");
    let (a, b, c) = stated;
    assert!(
        readme.contains(&format!("Rust ≥ {a}.{b}.{c}")),
        "the README states another minimum Rust version than Cargo.toml ({a}.{b}.{c})"
    );
}

/// The simulator models the queues the template declares: a redelivery after the main queue's
/// visibility timeout, and the retentions after which each queue drops a message.
#[test]
fn the_simulator_models_the_queues_the_template_declares() {
    use recon_harness::template::{Created, Template, ids};
    use recon_testkit::sim::world::{DLQ_RETENTION, MAIN_QUEUE_RETENTION, MAIN_QUEUE_VISIBILITY};
    let mut d = Template::ours()
        .unwrap()
        .deploy("000000000000", "us-east-1", &[])
        .unwrap();
    // What each refers to first: the stores' key, and the parking queue the DLQ redrives to.
    d.created(
        "DataKey",
        Created {
            reference: "key".into(),
            attributes: [("Arn".to_owned(), "arn:key".to_owned())].into(),
        },
    );
    d.created(
        "ParkingQueue",
        Created {
            reference: "parked".into(),
            attributes: [("Arn".to_owned(), "arn:parked".to_owned())].into(),
        },
    );
    let dlq = d.properties(ids::DEAD_LETTER_QUEUE).unwrap();
    d.created(
        ids::DEAD_LETTER_QUEUE,
        Created {
            reference: "dlq".into(),
            attributes: [("Arn".to_owned(), "arn:dlq".to_owned())].into(),
        },
    );
    let main = d.properties(ids::MAIN_QUEUE).unwrap();
    let secs = |p: &serde_json::Map<String, Value>, k: &str| p.get(k).and_then(Value::as_u64);
    assert_eq!(secs(&main, "VisibilityTimeout"), Some(MAIN_QUEUE_VISIBILITY.as_secs()));
    assert_eq!(
        secs(&main, "MessageRetentionPeriod"),
        Some(MAIN_QUEUE_RETENTION.as_secs())
    );
    assert_eq!(secs(&dlq, "MessageRetentionPeriod"), Some(DLQ_RETENTION.as_secs()));
}
