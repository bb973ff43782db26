//! Fuzzing on stable Rust: seeded, structure-aware mutation of a corpus kept in the repository
//! (`events/`, `shared/testkit/fuzz/`), at high counts, against every decoder of outside input.
//! A panic is a finding: the `fuzz` binary reports it with the input that caused it.

pub mod mutate;
pub mod targets;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use crate::sim::rng::Rng;
use targets::Target;

/// What fuzzing one target found.
#[derive(Debug)]
pub struct Finding {
    pub target: &'static str,
    pub inputs: u64,
    pub secs: f64,
    /// Inputs that got past the outer parse into the decoder's logic.
    pub reached: u64,
    /// Inputs that panicked (the first few), with the panic's text.
    pub panics: Vec<(String, String)>,
    pub panic_count: u64,
}

/// Run `count` mutants of `target`'s corpus through it. Mutants that still reach the decoder join
/// the corpus now and then, so later mutants go deeper.
pub fn fuzz(target: &Target, count: u64, seed: u64) -> Finding {
    fuzz_with_progress(target, count, seed, &mut |_| {})
}

/// [`fuzz`], calling `progress` with the finding so far every 100,000 inputs.
pub fn fuzz_with_progress(target: &Target, count: u64, seed: u64, progress: &mut dyn FnMut(&Finding)) -> Finding {
    let mut rng = Rng::new(seed);
    let mut corpus = target.corpus.clone();
    if corpus.is_empty() {
        corpus.push(String::new());
    }
    let started = Instant::now();
    let mut finding = Finding {
        target: target.name,
        inputs: 0,
        reached: 0,
        secs: 0.0,
        panics: Vec::new(),
        panic_count: 0,
    };
    for n in 1..=count {
        if n % 100_000 == 1 && n > 1 {
            finding.secs = started.elapsed().as_secs_f64();
            progress(&finding);
        }
        let a = corpus[rng.below(corpus.len() as u64) as usize].clone();
        let b = corpus[rng.below(corpus.len() as u64) as usize].clone();
        let input = mutate::mutate(&a, &b, &mut rng);
        finding.inputs += 1;
        let outcome = catch_unwind(AssertUnwindSafe(|| (target.run)(&input)));
        if let Ok(true) = outcome {
            finding.reached += 1;
            // Mutants that still reach the decoder seed later ones: they go deeper.
            if input.len() < 200_000 && rng.chance(20_000) {
                if corpus.len() < 2000 {
                    corpus.push(input.clone());
                } else {
                    let i = rng.below(corpus.len() as u64) as usize;
                    corpus[i] = input.clone();
                }
            }
        }
        if let Err(p) = outcome {
            finding.panic_count += 1;
            if finding.panics.len() < 5 {
                let text = p
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                finding.panics.push((input.clone(), text));
            }
        }
    }
    finding.secs = started.elapsed().as_secs_f64();
    finding
}
