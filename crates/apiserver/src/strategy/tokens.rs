//! lariat's Tokens (`management.lariat.dev`): a bearer credential that lives at most a year
//! and whose identity never changes. Who may create one for whom is escalation prevention's
//! business (`rbac.rs`).

use serde_json::Value;

use crate::status::Cause;
use lariat_api::admission::{Strategy, immutable};

pub struct Tokens;

impl Strategy for Tokens {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = vec![];
        for field in ["user", "groups", "tokenHash", "expirationTimestamp"] {
            causes.extend(immutable(
                object,
                old,
                &["spec", field],
                &format!("spec.{field}"),
            ));
        }
        if old.is_none() {
            let expires = &object["spec"]["expirationTimestamp"];
            let parsed = expires
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
            let now = chrono::Utc::now();
            let longest = chrono::Duration::days(lariat_api::management::TOKEN_MAX_LIFETIME_DAYS);
            match parsed {
                Some(at) if at <= now => causes.push(Cause::invalid(
                    "spec.expirationTimestamp",
                    expires,
                    "must be in the future",
                )),
                Some(at) if at > now + longest => causes.push(Cause::invalid(
                    "spec.expirationTimestamp",
                    expires,
                    "a token lives at most a year: create a new one when it expires",
                )),
                // The schema refuses what is not a date-time.
                _ => {}
            }
        }
        causes
    }
}
