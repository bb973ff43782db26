//! An auditor who reconciles while the run goes on, against what was sent so far.

use super::{DLQ, MAIN, World};

impl World {
    /// An auditor reconciles now, against the manifest of what was sent so far, whatever is
    /// queued: production reconcile must never say HOLDS while anything is queued, nor while the
    /// ground truth finds the books wrong.
    pub(super) fn audit_now(&self) {
        let s = &self.stores;
        let queued = s.sqs.depth(MAIN).total() + s.sqs.depth(DLQ).total();
        let Some(Ok(envelopes)) = crate::sim::exec::ready(recon_core::ports::all_envelopes(&*s.envelopes, None)) else {
            return;
        };
        let postings = s.books.postings_now();
        let audit = s.audit.records();
        let sent = self.sent.borrow().clone();
        let manifest: Vec<_> = sent
            .iter()
            .map(|p| recon_core::reconcile::manifest_entry(&p.body))
            .collect();
        let (out, problems) =
            recon_core::reconcile::outcomes(&postings, &envelopes, &audit, s.sqs.depth(DLQ).total() == 0);
        let r = recon_core::reconcile::reconcile(out, problems, Some(&manifest), queued);
        let at = self.clock.elapsed();
        self.log(format!("auditor: reconcile says {:?} with {queued} queued", r.verdict));
        if !r.holds {
            return;
        }
        if queued > 0 {
            self.audits
                .borrow_mut()
                .push((at, format!("reconcile says HOLDS with {queued} messages queued")));
        }
        let findings = crate::sim::truth::judge(
            &sent,
            &self.transactions.borrow(),
            &postings,
            &envelopes,
            &audit,
            &s.books.hand_offs(),
            &self.edits.borrow(),
        );
        let wrong = findings.books_wrong_in(None);
        if !wrong.is_empty() {
            self.audits
                .borrow_mut()
                .push((at, format!("false HOLDS during the run: {}", wrong.join("; "))));
        }
    }
}
