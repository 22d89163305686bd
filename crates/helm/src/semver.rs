//! Version constraints as Helm reads them (Masterminds/semver v3): `>=1.19-0`, `~1.2`,
//! `^0.3.1`, `1.2.x`, `1.2 - 1.4`, `>1, <3 || 5.x`. Used by `semverCompare`, a chart's
//! `kubeVersion` and the versions of its dependencies. The `semver` crate parses strict
//! versions; these constraints and Helm's lenient versions (`v1.28`, `1.28.9-eks-1`) are
//! Masterminds' own syntax, so they are read here.

use std::cmp::Ordering;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    numbers: [u64; 3],
    pre: String,
}

impl Version {
    /// A lenient version: an optional `v`, one to three numbers, a prerelease after `-` and
    /// build metadata after `+` (ignored).
    pub(crate) fn parse(text: &str) -> Option<Version> {
        let text = text.trim().trim_start_matches(['v', 'V']);
        let text = text.split('+').next()?;
        let (numbers_text, pre) = match text.split_once('-') {
            Some((n, p)) => (n, p.to_string()),
            None => (text, String::new()),
        };
        let mut numbers = [0u64; 3];
        let parts: Vec<&str> = numbers_text.split('.').collect();
        if parts.is_empty() || parts.len() > 3 {
            return None;
        }
        for (slot, part) in numbers.iter_mut().zip(&parts) {
            *slot = part.parse().ok()?;
        }
        Some(Version { numbers, pre })
    }

    pub(crate) fn major_minor(&self) -> (u64, u64) {
        (self.numbers[0], self.numbers[1])
    }

    pub(crate) fn patch(&self) -> u64 {
        self.numbers[2]
    }

    pub(crate) fn prerelease(&self) -> &str {
        &self.pre
    }

    fn compare(&self, other: &Version) -> Ordering {
        self.numbers
            .cmp(&other.numbers)
            .then_with(|| compare_prerelease(&self.pre, &other.pre))
    }
}

fn compare_prerelease(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    let (mut x, mut y) = (a.split('.'), b.split('.'));
    loop {
        match (x.next(), y.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) => {
                let order = match (p.parse::<u64>(), q.parse::<u64>()) {
                    (Ok(m), Ok(n)) => m.cmp(&n),
                    (Ok(_), Err(_)) => Ordering::Less,
                    (Err(_), Ok(_)) => Ordering::Greater,
                    _ => p.cmp(q),
                };
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

/// Whether `text` names one version (`1.2.3`, `v1.2.3-rc.1`, `=1.2.3`), not a range.
pub fn is_exact(text: &str) -> bool {
    let text = text.trim().trim_start_matches('=').trim();
    let numbers = text.trim_start_matches(['v', 'V']).split(['-', '+']).next();
    !text.contains(['~', '^', '>', '<', '|', ',', ' '])
        && numbers.is_some_and(|n| {
            n.split('.').count() == 3
                && n.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// The newest of `versions` that meets `constraint` (a version or a range, as `helm install
/// --version` takes it), or, with none, the newest that is not a prerelease, as Helm picks a
/// chart's version from a repository's index; versions that do not parse are passed over.
pub fn newest<'a>(
    constraint: Option<&str>,
    versions: impl IntoIterator<Item = &'a str>,
) -> Result<Option<&'a str>, String> {
    let constraint = constraint.map(str::trim).filter(|c| !c.is_empty());
    if let Some(c) = constraint {
        // Validate the constraint even when no version is offered.
        satisfies(c, "0.0.0")?;
    }
    let mut best: Option<(Version, &str)> = None;
    for text in versions {
        let Some(version) = Version::parse(text) else {
            continue;
        };
        let fits = match constraint {
            Some(c) => satisfies(c, text)?,
            None => version.pre.is_empty(),
        };
        if fits
            && best
                .as_ref()
                .is_none_or(|(b, _)| version.compare(b) == Ordering::Greater)
        {
            best = Some((version, text));
        }
    }
    Ok(best.map(|(_, text)| text))
}

/// Whether `version` meets `constraint`. A prerelease version meets only constraints that
/// name a prerelease themselves (hence charts' `>=1.19-0`).
pub(crate) fn satisfies(constraint: &str, version: &str) -> Result<bool, String> {
    let version =
        Version::parse(version).ok_or_else(|| format!("invalid semantic version {version:?}"))?;
    for alternative in constraint.split("||") {
        let mut all = true;
        for term in terms(alternative)? {
            if !term.admits(&version) {
                all = false;
                break;
            }
        }
        if all {
            return Ok(true);
        }
    }
    Ok(false)
}

struct Bound {
    low: Option<(Version, bool)>,
    high: Option<(Version, bool)>,
    not: Option<Version>,
    allows_pre: bool,
}

impl Bound {
    fn admits(&self, v: &Version) -> bool {
        if !v.pre.is_empty() && !self.allows_pre {
            return false;
        }
        if let Some(not) = &self.not {
            return v.compare(not) != Ordering::Equal;
        }
        let above = self
            .low
            .as_ref()
            .is_none_or(|(low, inclusive)| match v.compare(low) {
                Ordering::Greater => true,
                Ordering::Equal => *inclusive,
                Ordering::Less => false,
            });
        let below = self
            .high
            .as_ref()
            .is_none_or(|(high, inclusive)| match v.compare(high) {
                Ordering::Less => true,
                Ordering::Equal => *inclusive,
                Ordering::Greater => false,
            });
        above && below
    }
}

/// A partial version: the numbers given, and how many (`1.2.x` gives two).
struct Partial {
    version: Version,
    given: usize,
}

fn partial(text: &str) -> Result<Partial, String> {
    let text = text.trim().trim_start_matches(['v', 'V']);
    if text.is_empty() || text == "*" || text == "x" || text == "X" {
        return Ok(Partial {
            version: Version {
                numbers: [0; 3],
                pre: String::new(),
            },
            given: 0,
        });
    }
    let core = text.split('+').next().unwrap_or("");
    let (numbers_text, pre) = match core.split_once('-') {
        Some((n, p)) => (n, p.to_string()),
        None => (core, String::new()),
    };
    let mut numbers = [0u64; 3];
    let mut given = 0;
    for (i, part) in numbers_text.split('.').enumerate() {
        if i >= 3 {
            return Err(format!("improper constraint: {text}"));
        }
        if matches!(part, "x" | "X" | "*") {
            break;
        }
        numbers[i] = part
            .parse()
            .map_err(|_| format!("improper constraint: {text}"))?;
        given = i + 1;
    }
    Ok(Partial {
        version: Version { numbers, pre },
        given,
    })
}

/// The smallest version past every one that `p` covers (`1.2` → `1.3.0`).
fn next_after(p: &Partial) -> Option<Version> {
    let mut numbers = p.version.numbers;
    match p.given {
        0 => return None,
        1 => numbers = [numbers[0] + 1, 0, 0],
        2 => numbers = [numbers[0], numbers[1] + 1, 0],
        _ => return None,
    }
    Some(Version {
        numbers,
        pre: String::new(),
    })
}

fn terms(alternative: &str) -> Result<Vec<Bound>, String> {
    let alternative = alternative.trim();
    if let Some((low, high)) = alternative.split_once(" - ") {
        let (low, high) = (partial(low)?, partial(high)?);
        let allows_pre = !low.version.pre.is_empty() || !high.version.pre.is_empty();
        let high = match next_after(&high) {
            Some(next) if high.given < 3 => Some((next, false)),
            _ if high.given == 0 => None,
            _ => Some((high.version, true)),
        };
        return Ok(vec![Bound {
            low: Some((low.version, true)),
            high,
            not: None,
            allows_pre,
        }]);
    }
    let mut bounds = Vec::new();
    let normalized = alternative.replace(',', " ");
    let mut tokens = normalized.split_whitespace().peekable();
    while let Some(token) = tokens.next() {
        // `>= 1.2` with a space: the operator stands alone.
        let token = if token.chars().all(|c| "<>=!~^".contains(c)) {
            format!("{token}{}", tokens.next().unwrap_or(""))
        } else {
            token.to_string()
        };
        bounds.push(term(&token)?);
    }
    if bounds.is_empty() {
        bounds.push(Bound {
            low: None,
            high: None,
            not: None,
            allows_pre: false,
        });
    }
    Ok(bounds)
}

fn term(token: &str) -> Result<Bound, String> {
    let split = token
        .find(|c: char| !"<>=!~^".contains(c))
        .unwrap_or(token.len());
    let (op, rest) = token.split_at(split);
    let p = partial(rest)?;
    let allows_pre = !p.version.pre.is_empty();
    let v = p.version.clone();
    let bound = |low: Option<(Version, bool)>, high: Option<(Version, bool)>| Bound {
        low,
        high,
        not: None,
        allows_pre,
    };
    Ok(match op {
        "" | "=" if p.given < 3 => bound(Some((v, true)), next_after(&p).map(|n| (n, false))),
        "" | "=" => bound(Some((v.clone(), true)), Some((v, true))),
        "!=" => Bound {
            low: None,
            high: None,
            not: Some(v),
            allows_pre,
        },
        ">" if p.given < 3 => bound(next_after(&p).map(|n| (n, true)).or(Some((v, false))), None),
        ">" => bound(Some((v, false)), None),
        ">=" | "=>" => bound(Some((v, true)), None),
        "<" => bound(None, Some((v, false))),
        "<=" | "=<" if p.given < 3 => bound(None, next_after(&p).map(|n| (n, false))),
        "<=" | "=<" => bound(None, Some((v, true))),
        "~" | "~>" => {
            let high = if p.given <= 1 {
                Version {
                    numbers: [v.numbers[0] + 1, 0, 0],
                    pre: String::new(),
                }
            } else {
                Version {
                    numbers: [v.numbers[0], v.numbers[1] + 1, 0],
                    pre: String::new(),
                }
            };
            bound(Some((v, true)), Some((high, false)))
        }
        "^" => {
            let [major, minor, patch] = v.numbers;
            let high = if major > 0 || p.given <= 1 {
                [major + 1, 0, 0]
            } else if minor > 0 || p.given == 2 {
                [0, minor + 1, 0]
            } else {
                [0, 0, patch + 1]
            };
            bound(
                Some((v, true)),
                Some((
                    Version {
                        numbers: high,
                        pre: String::new(),
                    },
                    false,
                )),
            )
        }
        _ => return Err(format!("improper constraint: {token}")),
    })
}

#[cfg(test)]
mod tests {
    use super::satisfies;

    #[test]
    fn reads_constraints_as_masterminds_does() {
        let cases = [
            (">=1.19-0", "v1.28.9-eks-036c24b", true),
            (">=1.19", "v1.28.9-eks-036c24b", false),
            (">=1.19-0", "v1.18.2", false),
            ("~1.2", "1.2.9", true),
            ("~1.2", "1.3.0", false),
            ("^0.3.1", "0.3.9", true),
            ("^0.3.1", "0.4.0", false),
            ("1.2.x", "1.2.7", true),
            ("1.2.x", "1.3.0", false),
            ("1.2 - 1.4", "1.4.8", true),
            ("1.2 - 1.4", "1.5.0", false),
            (">1, <3 || 5.x", "5.1.0", true),
            (">1, <3 || 5.x", "3.0.0", false),
            ("*", "0.1.0", true),
            ("", "2.0.0", true),
            (">= 1.16.0", "v1.20.0", true),
        ];
        for (constraint, version, expected) in cases {
            assert_eq!(
                satisfies(constraint, version),
                Ok(expected),
                "{constraint} {version}"
            );
        }
        assert!(satisfies(">=a.b", "1.0.0").is_err());
    }
}
