//! Is the token check constant-time? A dudect-style test on the real
//! `Token::verify_header`: a guess wrong in its first byte against a guess
//! wrong in its last byte, Welch's t-test on cropped timings.
//!
//! Design, so that it cannot be flaky yet can fail:
//! - one header buffer, mutated in place between samples, so both classes
//!   read the same memory (no alignment or cache-line difference);
//! - the class of each sample is drawn at random, so machine noise (the
//!   other core, frequency changes) lands on both classes alike;
//! - samples above the pooled 95th percentile are dropped (interrupts,
//!   preemption);
//! - |t| must stay below 10 (dudect's "definitely leaks" line; 4.5 is its
//!   "maybe"), and the *same harness* must find a byte-by-byte early-exit
//!   comparison leaky (|t| far above 10): the test has the power to fail.
//!
//! Timing over HTTP would only add loopback jitter (tens of µs) to a
//! difference measured in ns; header parsing treats both classes alike.
//! `cargo test --release -p lab-agent --test agent timing` runs the same
//! test against optimized code.

use crate::corpus::Rng;
use crate::support::*;
use lab_agent::Token;
use std::hint::black_box;
use std::time::Instant;

/// Samples per run (both classes together), and calls timed per sample.
const SAMPLES: usize = 50_000;
const BATCH: usize = 32;
const T_LIMIT: f64 = 10.0;

/// Welch's t statistic of two samples, and the standard error of the
/// difference of their means (so `T_LIMIT * se` is the smallest difference
/// the test would flag).
fn welch_t(a: &[f64], b: &[f64]) -> (f64, f64) {
    let stats = |x: &[f64]| {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (n, mean, var)
    };
    let (na, ma, va) = stats(a);
    let (nb, mb, vb) = stats(b);
    let se = (va / na + vb / nb).sqrt();
    ((ma - mb) / se, se)
}

/// Times `check` on `header` with its byte at `first` or at `last` made
/// wrong, class chosen at random per sample; returns t and the two means
/// in ns per call.
fn measure(
    header: &mut [u8],
    first: usize,
    last: usize,
    check: impl Fn(&[u8]) -> bool,
) -> (f64, f64, f64, f64) {
    let mut rng = Rng::new(0x7e57);
    let mut times: Vec<(bool, f64)> = Vec::with_capacity(SAMPLES);
    // Warm up caches and the branch predictor on both classes.
    for i in 0..2000 {
        let at = if i % 2 == 0 { first } else { last };
        header[at] ^= 1;
        black_box(check(black_box(&*header)));
        header[at] ^= 1;
    }
    for _ in 0..SAMPLES {
        let is_first = rng.next() & 1 == 0;
        let at = if is_first { first } else { last };
        header[at] ^= 1;
        let started = Instant::now();
        for _ in 0..BATCH {
            black_box(check(black_box(&*header)));
        }
        let ns = started.elapsed().as_nanos() as f64 / BATCH as f64;
        header[at] ^= 1;
        times.push((is_first, ns));
    }
    let mut sorted: Vec<f64> = times.iter().map(|t| t.1).collect();
    sorted.sort_by(f64::total_cmp);
    let crop = sorted[sorted.len() * 95 / 100];
    let pick = |class: bool| -> Vec<f64> {
        times
            .iter()
            .filter(|t| t.0 == class && t.1 <= crop)
            .map(|t| t.1)
            .collect()
    };
    let (a, b) = (pick(true), pick(false));
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
    let (t, se) = welch_t(&a, &b);
    (t, se, mean(&a), mean(&b))
}

/// The comparison a careless implementation would make: stops at the
/// first wrong byte.
fn early_exit(token: &[u8], header: &[u8]) -> bool {
    let given = &header[b"Bearer ".len()..];
    if given.len() != token.len() {
        return false;
    }
    for (x, y) in token.iter().zip(given) {
        if black_box(*x) != black_box(*y) {
            return false;
        }
    }
    true
}

#[test]
fn a_wrong_first_byte_and_a_wrong_last_byte_take_the_same_time() {
    let dir = TempDir::new("timing");
    write_file(&dir.join("token"), TOKEN, 0o600);
    let token = Token::load(&dir.join("token")).unwrap();
    let mut header = format!("Bearer {TOKEN}").into_bytes();
    assert!(token.verify_header(Some(&header)));
    let first = b"Bearer ".len();
    let last = header.len() - 1;

    let (t, se, ns_first, ns_last) =
        measure(&mut header, first, last, |h| token.verify_header(Some(h)));
    let (t_leaky, _, leaky_first, leaky_last) = measure(&mut header, first, last, |h| {
        early_exit(TOKEN.as_bytes(), h)
    });
    eprintln!(
        "timing: {SAMPLES} samples x {BATCH} calls; verify_header: t = {t:.2} ({ns_first:.1} vs {ns_last:.1} ns/call, \
         would flag a difference over {:.2} ns/call); \
         early-exit control: t = {t_leaky:.2} ({leaky_first:.1} vs {leaky_last:.1} ns/call)",
        T_LIMIT * se
    );
    assert!(
        t_leaky.abs() > T_LIMIT,
        "the harness cannot even see an early-exit comparison (t = {t_leaky:.2}): it proves nothing"
    );
    assert!(
        t.abs() < T_LIMIT,
        "verify_header's time depends on where the guess is wrong: t = {t:.2} ({ns_first:.1} vs {ns_last:.1} ns per call)"
    );
}
