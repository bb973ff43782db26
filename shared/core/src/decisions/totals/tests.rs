use super::*;
use crate::decisions::triage::{deadlines, tests::env, triage};
use crate::domain::{DlqEnvelope, EnvelopeStatus, PeriodRecord, PeriodStatus};

fn snapshot() -> ReferenceSnapshot {
    let close = |entity: &str, period: &str, day: u32| PeriodRecord {
        entity: entity.into(),
        period: period.into(),
        status: PeriodStatus::Open,
        closes_on: NaiveDate::from_ymd_opt(2026, 12, day),
    };
    ReferenceSnapshot::new([], [close("E1", "2026-11", 5), close("E2", "2026-12", 3)])
}

fn with_period(mut e: DlqEnvelope, period: &str) -> DlqEnvelope {
    e.accounting_period = Some(period.into());
    e
}

fn envelopes() -> Vec<DlqEnvelope> {
    vec![
        with_period(
            env("a", "UNMAPPED_CURRENCY:XAU", Some("1.25"), "XAU", "E1", 5),
            "2026-11",
        ),
        with_period(
            env("b", "UNMAPPED_CURRENCY:XAU", Some("2.5"), "xau", "E2", 1),
            "2026-12",
        ),
        env("c", "UNMAPPED_CURRENCY:XAU", Some("10"), "XAU", "E1", 9),
        env("d", "INVALID_DECIMAL", Some("1,00"), "USD", "E1", 3),
    ]
}

#[test]
fn groups_from_totals_are_triage_of_the_envelopes() {
    let es = envelopes();
    let snap = snapshot();
    let from_totals = groups(&recount(&es).unwrap(), &snap).unwrap();
    let from_envelopes = triage(&es);
    let due = deadlines(&es, &snap);
    assert_eq!(from_totals.len(), from_envelopes.len());
    for ((g, decide_before), want) in from_totals.iter().zip(&from_envelopes) {
        assert_eq!((g.failure_code, &g.root_cause), (want.failure_code, &want.root_cause));
        assert_eq!(g.tally, want.tally);
        assert_eq!(g.entities, want.entities);
        // To the hour.
        assert_eq!(
            g.oldest.format("%Y-%m-%d %H").to_string(),
            want.oldest.format("%Y-%m-%d %H").to_string()
        );
        assert_eq!(
            *decide_before,
            due.get(&(want.failure_code, want.root_cause.clone())).copied()
        );
    }
    assert_eq!(from_totals[0].1, NaiveDate::from_ymd_opt(2026, 12, 3));
}

#[test]
fn taking_away_what_was_added_leaves_nothing() {
    let es = envelopes();
    let mut t = Totals::default();
    for e in &es {
        t.apply(&Contribution::of(e), 1).unwrap();
    }
    for e in &es {
        t.apply(&Contribution::of(e), -1).unwrap();
    }
    assert_eq!(t.normalized(), Totals::default());
}

#[test]
fn only_pending_envelopes_count() {
    let mut es = envelopes();
    es[0].status = EnvelopeStatus::Replayed;
    let totals = recount(&es).unwrap();
    let xau: i64 = totals
        .iter()
        .filter(|(k, _)| k.root_cause == "UNMAPPED_CURRENCY:XAU")
        .map(|(_, t)| t.count)
        .sum();
    assert_eq!(xau, 2);
}

#[test]
fn amounts_outside_the_bounds_count_without_amount() {
    let cases = [
        ("1.123456789", "USD"),         // nine decimal places
        ("1000000000000000000", "USD"), // 10^18
        ("5", "XAU1"),                  // not three letters
        ("5", "U$D"),
    ];
    for (amount, currency) in cases {
        let e = env("x", "C", Some(amount), currency, "E1", 0);
        assert_eq!(Contribution::of(&e).amount, None, "{amount} {currency}");
    }
    let e = env("x", "C", Some("-999999999999999999.12345678"), "usd", "e1", 0);
    let c = Contribution::of(&e);
    assert_eq!(c.amount.map(|(c, _)| c), Some("USD".to_owned()));
    assert_eq!(c.entity_period, Some(("E1".to_owned(), NO_PERIOD.to_owned())));
}

#[test]
fn an_entity_outside_the_schema_is_not_listed() {
    let e = env("x", "C", Some("1"), "USD", "not an entity", 0);
    assert_eq!(Contribution::of(&e).entity_period, None);
}

#[test]
fn totals_below_zero_are_refused() {
    let e = env("x", "C", Some("1"), "USD", "E1", 0);
    let c = Contribution::of(&e);
    let mut t = Totals::default();
    t.apply(&c, 1).unwrap();
    t.apply(&c, 1).unwrap();
    t.entity_periods.insert(("E9".into(), NO_PERIOD.into()), -1);
    let totals = BTreeMap::from([(c.key.clone(), t)]);
    assert!(groups(&totals, &snapshot()).unwrap_err().contains("below zero"));
}
