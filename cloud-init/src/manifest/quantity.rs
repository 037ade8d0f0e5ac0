//! Kubernetes resource quantities (`4Gi`, `10737418240`, `9.5G`, `1e9`), as
//! `k8s.io/apimachinery/pkg/api/resource` writes them: what `--memory`
//! accepts and what a PVC's `status.capacity.storage` says. Exact: a
//! quantity is a fraction, never a float, so `10Gi` is 10,737,418,240 bytes
//! and a comparison with a lab's `min_root_bytes` is never off by rounding.

/// The longest quantity we read; Kubernetes' own are far shorter.
const MAX_LEN: usize = 40;
/// Digits of a quantity's number: 10^24 times any unit fits in a `u128`.
const MAX_DIGITS: usize = 24;

/// A non-negative quantity: `num / den` of its unit (bytes, cores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    num: u128,
    den: u128,
}

impl Quantity {
    /// Parses `s`; `Err` says what is wrong, in a phrase.
    pub fn parse(s: &str) -> Result<Quantity, String> {
        const FORM: &str = "write a number and a unit, like `4Gi`, `512Mi` or `10G`";
        if s.is_empty() || s.len() > MAX_LEN {
            return Err(format!("is not a quantity: {FORM}"));
        }
        let digits_end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, suffix) = s.split_at(digits_end);
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && frac.is_empty() || frac.contains('.') {
            return Err(format!("is not a quantity: {FORM}"));
        }
        if whole.len() + frac.len() > MAX_DIGITS {
            return Err("is too large".into());
        }
        let mut num: u128 = 0;
        for d in whole.bytes().chain(frac.bytes()) {
            num = num * 10 + u128::from(d - b'0');
        }
        let mut den = 10u128.pow(frac.len() as u32);
        let (mul, div) = multiplier(suffix).ok_or_else(|| {
            format!(
                "has the unknown unit `{suffix}`: use Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E \
                 or none ({FORM})"
            )
        })?;
        num = num
            .checked_mul(mul)
            .ok_or_else(|| "is too large".to_owned())?;
        den *= div;
        Ok(Quantity { num, den })
    }

    /// Whole units, rounded down (a disk's bytes).
    pub fn floor(self) -> u128 {
        self.num / self.den
    }

    pub fn is_zero(self) -> bool {
        self.num == 0
    }
}

/// The suffix's factor as a fraction (`m` is a thousandth).
fn multiplier(suffix: &str) -> Option<(u128, u128)> {
    let bin = |p: u32| Some((1u128 << (10 * p), 1));
    let dec = |p: u32| Some((10u128.pow(3 * p), 1));
    match suffix {
        "" => Some((1, 1)),
        "Ki" => bin(1),
        "Mi" => bin(2),
        "Gi" => bin(3),
        "Ti" => bin(4),
        "Pi" => bin(5),
        "Ei" => bin(6),
        "n" => Some((1, 1_000_000_000)),
        "u" => Some((1, 1_000_000)),
        "m" => Some((1, 1000)),
        "k" => dec(1),
        "M" => dec(2),
        "G" => dec(3),
        "T" => dec(4),
        "P" => dec(5),
        "E" => dec(6),
        s => {
            // A decimal exponent: `e` or `E` and a small integer.
            let exp = s.strip_prefix(['e', 'E'])?;
            let (neg, digits) = match exp.strip_prefix(['-', '+']) {
                Some(d) => (exp.starts_with('-'), d),
                None => (false, exp),
            };
            if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let p: u32 = digits.parse().ok()?;
            let f = 10u128.checked_pow(p)?;
            Some(if neg { (1, f) } else { (f, 1) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_read_exactly() {
        for (s, floor) in [
            ("10Gi", 10 << 30),
            ("4Gi", 4 << 30),
            ("10737418240", 10_737_418_240),
            ("9.5G", 9_500_000_000),
            ("1e9", 1_000_000_000),
            ("1E3", 1000),
            ("1500m", 1),
            ("0.5Ki", 512),
            (".5Mi", 512 * 1024),
            ("0", 0),
        ] {
            assert_eq!(Quantity::parse(s).unwrap().floor(), floor, "{s}");
        }
        for s in [
            "", "Gi", "-1Gi", "1 Gi", "1GB", "1.2.3", "1e", "1e999", "4gi", ".",
        ] {
            assert!(Quantity::parse(s).is_err(), "{s}");
        }
        assert!(Quantity::parse("0Gi").unwrap().is_zero());
    }
}
