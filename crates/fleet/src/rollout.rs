//! Fleet's `rolloutStrategy`: which clusters get a bundle's new version now, and which wait.
//!
//! Every targeted cluster's BundleDeployment carries the new version as staged
//! (`stagedDeploymentID`); it becomes the deployed one (`deploymentID`) only while few enough
//! clusters are unavailable, counted over the whole bundle (`maxUnavailable`, default 100%)
//! and over its partition (the partition's `maxUnavailable`, else the bundle's). Partitions are
//! rolled out in order, and a partition with more unavailable clusters than it may have stops
//! the ones after it (beyond `maxUnavailablePartitions`, default 0). A cluster is unavailable
//! while the version it was given is not applied and Ready; a cluster that is given a new
//! version counts as unavailable from then on.
//!
//! Partitions are those the strategy lists (a cluster in the first that chooses it), or, with
//! 200 clusters or more, automatic ones of `autoPartitionSize` (default 25%) in name order.
//! Where lariat differs from Fleet: clusters no listed partition chooses form one last
//! partition rather than never being deployed, and a limit never comes out below one cluster,
//! so a strategy cannot stall a rollout by itself.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use lariat_api::fleet::{ClusterGroup, PartitionStatus, RolloutStrategy};

use crate::target::{Candidate, chooses};

/// Below this many clusters, automatic partitioning is off (as in Fleet).
const AUTO_PARTITION_THRESHOLD: usize = 200;

/// Partitions a strategy may list: each is matched against every cluster at every rollout
/// step, and all of them are in the Bundle's status.
pub const MAX_PARTITIONS: usize = 256;

/// A number of clusters, or a percentage of `count` (rounded down), at least one and at most
/// `count` (more than every cluster means every cluster).
pub fn limit(count: usize, value: Option<&IntOrString>, default: &str) -> Result<usize, String> {
    let resolved = match value {
        Some(IntOrString::Int(n)) if *n < 0 => {
            return Err(format!("{n} is negative"));
        }
        Some(IntOrString::Int(n)) => *n as usize,
        Some(IntOrString::String(text)) => percentage(count, text)?,
        None => percentage(count, default)?,
    };
    Ok(resolved.min(count).max(1))
}

fn percentage(count: usize, text: &str) -> Result<usize, String> {
    if let Ok(n) = text.parse::<usize>() {
        return Ok(n);
    }
    let percent: f64 = text
        .strip_suffix('%')
        .and_then(|p| p.trim().parse().ok())
        .filter(|p: &f64| p.is_finite() && (0.0..=100.0).contains(p))
        .ok_or_else(|| {
            format!("{text:?} is neither a number nor a percentage from 0% to 100%, such as 25%")
        })?;
    Ok((count as f64 * percent / 100.0) as usize)
}

/// Checks a strategy's values, for a `fleet.yaml` to be refused before anything is deployed.
pub fn validate(strategy: &RolloutStrategy) -> Result<(), String> {
    let check = |field: &str, value: Option<&IntOrString>| {
        limit(1, value, "0").map_err(|e| format!("rolloutStrategy.{field}: {e}"))
    };
    check("maxUnavailable", strategy.max_unavailable.as_ref())?;
    check(
        "maxUnavailablePartitions",
        strategy.max_unavailable_partitions.as_ref(),
    )?;
    // autoPartitionSize 0 or less turns automatic partitions off, as in Fleet.
    if !matches!(strategy.auto_partition_size, Some(IntOrString::Int(_))) {
        check("autoPartitionSize", strategy.auto_partition_size.as_ref())?;
    }
    let partitions = strategy.partitions.as_deref().unwrap_or_default();
    if partitions.len() > MAX_PARTITIONS {
        return Err(format!(
            "rolloutStrategy.partitions: {} partitions, at most {MAX_PARTITIONS}",
            partitions.len()
        ));
    }
    for (i, partition) in partitions.iter().enumerate() {
        check(
            &format!("partitions[{i}].maxUnavailable"),
            partition.max_unavailable.as_ref(),
        )?;
        crate::target::target_problem(&partition.target).map_or(Ok(()), |e| {
            Err(format!("rolloutStrategy.partitions[{i}].{e}"))
        })?;
    }
    Ok(())
}

/// One targeted cluster as the rollout sees it.
pub struct Member<'a> {
    pub cluster: Candidate<'a>,
    /// Whether it already deploys the new version (or is new: nothing to hold it at).
    pub current: bool,
    /// Whether the version it was given is not applied and Ready.
    pub unavailable: bool,
    /// Whether its bundle or cluster is paused (it keeps what it has).
    pub paused: bool,
}

/// What the rollout decided.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Per member (same order): whether it deploys the new version now.
    pub promote: Vec<bool>,
    /// Per member: the partition it is in, by index into `partitions`.
    pub partition_of: Vec<usize>,
    pub partitions: Vec<PartitionStatus>,
    pub max_unavailable: usize,
    pub unavailable: usize,
    pub max_unavailable_partitions: usize,
    pub unavailable_partitions: usize,
}

/// Decides which members get the new version now. `members` are in name order.
pub fn plan(
    strategy: &RolloutStrategy,
    members: &[Member<'_>],
    groups: &[&ClusterGroup],
) -> Result<Plan, String> {
    validate(strategy)?;
    let total = members.len();
    let mut partitions: Vec<(String, Option<&IntOrString>, Vec<usize>)> = Vec::new();
    match strategy.partitions.as_deref() {
        Some(listed) if !listed.is_empty() => {
            let mut placed = vec![false; total];
            for (i, partition) in listed.iter().enumerate() {
                let chosen: Vec<usize> = (0..total)
                    .filter(|&m| {
                        !placed[m] && chooses(&partition.target, &members[m].cluster, groups)
                    })
                    .collect();
                for &m in &chosen {
                    placed[m] = true;
                }
                let name = partition
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("partition {i}"));
                let max = partition
                    .max_unavailable
                    .as_ref()
                    .or(strategy.max_unavailable.as_ref());
                partitions.push((name, max, chosen));
            }
            let rest: Vec<usize> = (0..total).filter(|&m| !placed[m]).collect();
            if !rest.is_empty() {
                partitions.push((
                    "unpartitioned".into(),
                    strategy.max_unavailable.as_ref(),
                    rest,
                ));
            }
        }
        _ => {
            let disabled =
                matches!(strategy.auto_partition_size, Some(IntOrString::Int(n)) if n <= 0);
            let size = if disabled || total < AUTO_PARTITION_THRESHOLD {
                total.max(1)
            } else {
                limit(total, strategy.auto_partition_size.as_ref(), "25%")?
            };
            let indices: Vec<usize> = (0..total).collect();
            for chunk in indices.chunks(size) {
                let (first, last) = (chunk[0], chunk[chunk.len() - 1] + 1);
                let name = if chunk.len() == total {
                    "All".to_string()
                } else {
                    format!("Partition {first} - {last}")
                };
                partitions.push((name, strategy.max_unavailable.as_ref(), chunk.to_vec()));
            }
        }
    }
    let mut plan = Plan {
        promote: members.iter().map(|m| m.current).collect(),
        partition_of: vec![0; total],
        max_unavailable: limit(total, strategy.max_unavailable.as_ref(), "100%")?,
        unavailable: members.iter().filter(|m| m.unavailable).count(),
        max_unavailable_partitions: match strategy.max_unavailable_partitions.as_ref() {
            // Default 0: a partition over its limit stops the next ones.
            None => 0,
            value => limit(partitions.len(), value, "0")?,
        },
        ..Default::default()
    };
    let mut stopped = false;
    for (index, (name, max, chosen)) in partitions.into_iter().enumerate() {
        let mut status = PartitionStatus {
            name: Some(name),
            count: chosen.len() as i32,
            max_unavailable: limit(chosen.len(), max, "100%")? as i32,
            unavailable: chosen.iter().filter(|&&m| members[m].unavailable).count() as i32,
        };
        for &m in &chosen {
            plan.partition_of[m] = index;
            let member = &members[m];
            if stopped || member.current || member.paused {
                continue;
            }
            // An unavailable cluster is no worse for getting the new version.
            let room = plan.unavailable < plan.max_unavailable
                && status.unavailable < status.max_unavailable;
            if member.unavailable || room {
                plan.promote[m] = true;
                if !member.unavailable {
                    plan.unavailable += 1;
                    status.unavailable += 1;
                }
            }
        }
        if status.unavailable > status.max_unavailable {
            plan.unavailable_partitions += 1;
        }
        plan.partitions.push(status);
        if plan.unavailable_partitions > plan.max_unavailable_partitions {
            stopped = true;
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use lariat_api::fleet::{Partition, Target};
    use std::collections::BTreeMap;

    fn labels(env: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("env".to_string(), env.to_string())])
    }

    struct Fixture {
        names: Vec<String>,
        labels: Vec<BTreeMap<String, String>>,
    }

    impl Fixture {
        fn new(envs: &[&str]) -> Fixture {
            Fixture {
                names: (0..envs.len()).map(|i| format!("c{i:03}")).collect(),
                labels: envs.iter().map(|e| labels(e)).collect(),
            }
        }

        fn members(&self, state: impl Fn(usize) -> (bool, bool)) -> Vec<Member<'_>> {
            (0..self.names.len())
                .map(|i| {
                    let (current, unavailable) = state(i);
                    Member {
                        cluster: Candidate {
                            name: &self.names[i],
                            labels: &self.labels[i],
                        },
                        current,
                        unavailable,
                        paused: false,
                    }
                })
                .collect()
        }
    }

    fn promoted(plan: &Plan) -> usize {
        plan.promote.iter().filter(|p| **p).count()
    }

    #[test]
    fn limits_are_numbers_or_percentages_and_never_below_one() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(limit(10, None, "100%"), Ok(10));
        assert_eq!(limit(10, Some(&pct("25%")), "100%"), Ok(2));
        assert_eq!(limit(10, Some(&pct("1%")), "100%"), Ok(1));
        assert_eq!(limit(10, Some(&IntOrString::Int(3)), "100%"), Ok(3));
        assert_eq!(limit(10, Some(&IntOrString::Int(0)), "100%"), Ok(1));
        assert_eq!(limit(10, Some(&IntOrString::Int(50)), "100%"), Ok(10));
        assert!(limit(10, Some(&IntOrString::Int(-5)), "100%").is_err());
        assert!(limit(10, Some(&pct("99999999999999999999%")), "100%").is_err());
        assert_eq!(limit(10, Some(&pct("4")), "100%"), Ok(4));
        assert!(
            limit(10, Some(&pct("half")), "100%")
                .unwrap_err()
                .contains("half")
        );
        assert!(limit(10, Some(&pct("-5%")), "100%").is_err());
    }

    #[test]
    fn by_default_every_cluster_gets_the_new_version_at_once() {
        let fixture = Fixture::new(&["a"; 5]);
        let plan = plan(
            &RolloutStrategy::default(),
            &fixture.members(|_| (false, false)),
            &[],
        )
        .unwrap();
        assert_eq!(promoted(&plan), 5);
        assert_eq!(plan.partitions.len(), 1);
        assert_eq!(plan.partitions[0].name.as_deref(), Some("All"));
    }

    #[test]
    fn max_unavailable_holds_the_rest_back_until_clusters_are_ready_again() {
        let fixture = Fixture::new(&["a"; 10]);
        let strategy = RolloutStrategy {
            max_unavailable: Some(IntOrString::Int(2)),
            ..Default::default()
        };
        let plan1 = plan(&strategy, &fixture.members(|_| (false, false)), &[]).unwrap();
        assert_eq!(plan1.promote[..3], [true, true, false]);
        assert_eq!(promoted(&plan1), 2);
        // The two updated are still applying: nothing more goes.
        let plan2 = plan(&strategy, &fixture.members(|i| (i < 2, i < 2)), &[]).unwrap();
        assert_eq!(promoted(&plan2), 2);
        // One is Ready: one more goes.
        let plan3 = plan(&strategy, &fixture.members(|i| (i < 2, i == 1)), &[]).unwrap();
        assert_eq!(promoted(&plan3), 3);
        // A cluster that is unavailable anyway is given the new version at once.
        let plan4 = plan(
            &strategy,
            &fixture.members(|i| (i < 2, i == 1 || i == 9)),
            &[],
        )
        .unwrap();
        assert!(plan4.promote[9]);
    }

    #[test]
    fn partitions_go_in_order_and_one_over_its_limit_stops_the_next() {
        let fixture = Fixture::new(&["canary", "prod", "prod", "canary", "dev"]);
        let partition = |name: &str, env: &str, max: i32| Partition {
            name: Some(name.into()),
            max_unavailable: Some(IntOrString::Int(max)),
            target: Target {
                cluster_selector: Some(LabelSelector {
                    match_labels: Some(labels(env)),
                    ..Default::default()
                }),
                ..Default::default()
            },
        };
        let strategy = RolloutStrategy {
            partitions: Some(vec![
                partition("canary", "canary", 1),
                partition("prod", "prod", 2),
            ]),
            ..Default::default()
        };
        // Nothing updated yet: canary gets one (its limit); at its limit, not over it, the
        // next partitions go too (each bound only by its own limit and the bundle's).
        let first = plan(&strategy, &fixture.members(|_| (false, false)), &[]).unwrap();
        assert_eq!(first.promote, [true, true, true, false, true]);
        let names: Vec<_> = first
            .partitions
            .iter()
            .map(|p| p.name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            ["canary", "prod", "unpartitioned"],
            "dev is in no partition"
        );
        assert_eq!(first.partition_of, [0, 1, 1, 0, 2]);
        // Both canaries unavailable (one failed to apply): over canary's limit of one, so
        // prod and dev wait.
        let held = plan(
            &strategy,
            &fixture.members(|i| (i == 0, i == 0 || i == 3)),
            &[],
        )
        .unwrap();
        assert_eq!(held.promote, [true, false, false, true, false]);
        assert_eq!(held.unavailable_partitions, 1);
    }

    #[test]
    fn two_hundred_clusters_or_more_are_partitioned_automatically() {
        let fixture = Fixture::new(&["a"; 200]);
        let plan = plan(
            &RolloutStrategy::default(),
            &fixture.members(|_| (false, false)),
            &[],
        )
        .unwrap();
        assert_eq!(plan.partitions.len(), 4);
        assert_eq!(
            plan.partitions[1].name.as_deref(),
            Some("Partition 50 - 100")
        );
        assert_eq!(promoted(&plan), 200, "100% may be unavailable by default");
    }
}
