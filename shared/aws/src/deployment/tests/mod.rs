/// A stack without the reservation protocol has no dedup table and no such output: its names
/// still read (the dedup table's is the one it would have, which nothing uses).
#[test]
fn a_stack_without_a_dedup_table_reads() {
    use super::outputs;
    let names = recon_core::resources::ResourceNames::derive("acme", "123456789012", "eu-west-1");
    let url = |q: &str| format!("https://sqs.eu-west-1.amazonaws.com/123456789012/{q}");
    let all = [
        (outputs::STACK_PREFIX, names.prefix.clone()),
        (outputs::MAIN_QUEUE_URL, url(&names.main_queue)),
        (outputs::DEAD_LETTER_QUEUE_URL, url(&names.dead_letter_queue)),
        (outputs::LEDGER_TABLE, names.ledger_table.clone()),
        (outputs::ENVELOPE_TABLE, names.envelope_table.clone()),
        (outputs::REFERENCE_TABLE, names.reference_table.clone()),
        (outputs::AUDIT_TABLE, names.audit_table.clone()),
        (outputs::QUARANTINE_BUCKET, names.quarantine_bucket.clone()),
        (outputs::QUARANTINE_BUCKET_OWNER, names.account.clone()),
        (outputs::SWEEP_SCHEDULE, names.sweep_schedule.clone()),
        (outputs::SEAL_SCHEDULE, names.seal_schedule.clone()),
        (outputs::LEDGER_KIND, "dynamodb".into()),
    ];
    let read = super::from_outputs(|k| all.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap();
    assert_eq!(read.names, names);
    assert_eq!(read.ledger, [(recon_core::config::vars::LEDGER, "dynamodb".to_owned())]);
    let without_audit = super::from_outputs(|k| {
        all.iter()
            .find(|(n, _)| *n == k && *n != outputs::AUDIT_TABLE)
            .map(|(_, v)| v.clone())
    });
    assert!(without_audit.is_err(), "every other output is required");
}

#[test]
fn the_pointers_the_roles_put_are_not_heads() {
    // The roles may put no key under the heads' prefix (tests/iam.rs).
    assert!(!"#trail#id".starts_with(recon_core::resources::keys::AUDIT_HEAD_PREFIX));
    assert!(!"#config#consumer".starts_with(recon_core::resources::keys::AUDIT_HEAD_PREFIX));
}
