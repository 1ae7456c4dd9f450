//! The floors said (docs/policies.md#cpu-percentile): a throttled container's CPU request and an
//! OOM-killed one's memory request never decrease ([`super::container::never_below_current`]);
//! when that floor is what sets the request, the recommendation carries a risk flag and a reason
//! naming the signal, its value and when.

use jiff::Timestamp;

use super::container::{ContainerRec, ContainerSignals, OomSeen};
use super::workload::span;
use crate::quantity::{format_cpu_millis, format_memory_bytes};

/// Risk flag: the throttling floor holds a container's CPU request above what usage alone
/// recommends.
pub const RISK_THROTTLED: &str = "throttled";
/// Risk flag: the OOM floor holds a container's memory request above what usage alone
/// recommends.
pub const RISK_OOM_KILLED: &str = "oom-killed";

/// A time in a reason: minutes, UTC.
fn at(t: i64) -> String {
    Timestamp::from_second(t)
        .map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|_| t.to_string())
}

/// The risk flags (each once, in order) and reasons of the floors that set a request: per
/// container (`signals` and `recs` side by side, `None` out of scope) whose CPU request the
/// throttling floor holds, or whose memory request the OOM floor holds.
pub fn floor_reasons(
    signals: &[&ContainerSignals],
    recs: &[Option<ContainerRec>],
) -> (Vec<String>, Vec<String>) {
    let (mut flags, mut reasons) = (Vec::new(), Vec::new());
    let mut flag = |f: &str| {
        if !flags.iter().any(|x| x == f) {
            flags.push(f.to_string());
        }
    };
    for (c, rec) in signals.iter().zip(recs) {
        let Some(rec) = rec else { continue };
        if let (Some(usage), Some(held)) = (rec.cpu.held, rec.cpu.value) {
            flag(RISK_THROTTLED);
            let mut what = "throttled".to_string();
            if let Some(e) = c.throttling {
                what = format!("throttled {:.0} % of CFS periods", e.peak_share * 100.0);
                if let Some(s) = e.seconds {
                    what += &format!(" for {}", span(s));
                }
                if let Some(t) = e.last_at {
                    what += &format!(" (last at {})", at(t));
                }
            }
            reasons.push(format!(
                "{}: {what}; CPU request held at {} (usage alone: {})",
                c.name,
                format_cpu_millis(held),
                format_cpu_millis(usage)
            ));
        }
        if let (Some(usage), Some(held)) = (rec.memory.held, rec.memory.value) {
            flag(RISK_OOM_KILLED);
            let what = match c.oom_killed_at {
                Some(OomSeen::Killed(t)) => {
                    format!("OOM-killed at {} (a running pod's last termination)", at(t))
                }
                Some(OomSeen::Shown(t)) => format!(
                    "OOM-killed (kube-state-metrics showed it as a pod's last termination until {})",
                    at(t)
                ),
                None => "OOM-killed".to_string(),
            };
            reasons.push(format!(
                "{}: {what}; memory request held at {} (usage alone: {})",
                c.name,
                format_memory_bytes(held),
                format_memory_bytes(usage)
            ));
        }
    }
    (flags, reasons)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ResourceRequests;
    use crate::quantity::MIB;
    use crate::recommenders::resources::container::{Episode, PolicyParams, recommend_container};

    const T: i64 = 1_767_612_600; // 2026-01-05 11:30 UTC

    fn app(cpu: f64, memory: f64) -> ContainerSignals {
        ContainerSignals {
            name: "app".into(),
            current: ResourceRequests {
                cpu_millis: Some(500),
                memory_bytes: Some(512 * MIB),
            },
            cpu: Some(cpu),
            memory: Some(memory),
            ..Default::default()
        }
    }

    fn said(c: &ContainerSignals) -> (Vec<String>, Vec<String>) {
        let p = PolicyParams::from_spec(&Default::default()).unwrap();
        floor_reasons(&[c], &[Some(recommend_container(c, &p))])
    }

    #[test]
    fn floor_reasons_name_the_signal_its_value_and_when() {
        // p95 0.2 cores × 1.15 = 230m, below the 500m request: the throttling floor holds it.
        let mut c = app(0.2, 300.0 * MIB as f64);
        c.throttled = true;
        c.throttling = Some(Episode {
            peak_share: 0.2,
            seconds: Some(600),
            last_at: Some(T),
        });
        assert_eq!(
            said(&c),
            (
                vec!["throttled".to_string()],
                vec![
                    "app: throttled 20 % of CFS periods for 10m (last at 2026-01-05 11:30 UTC); \
                     CPU request held at 500m (usage alone: 230m)"
                        .to_string()
                ]
            )
        );
        // OOM-killed: 300Mi × 1.2 = 360Mi, below the 512Mi request.
        let mut c = app(0.2, 300.0 * MIB as f64);
        c.oom_killed = true;
        c.oom_killed_at = Some(OomSeen::Shown(T));
        let (flags, reasons) = said(&c);
        assert_eq!(flags, ["oom-killed"]);
        assert_eq!(
            reasons,
            [
                "app: OOM-killed (kube-state-metrics showed it as a pod's last termination until \
              2026-01-05 11:30 UTC); memory request held at 512Mi (usage alone: 360Mi)"
            ]
        );
    }

    #[test]
    fn floor_reasons_say_nothing_when_usage_alone_sets_the_request() {
        // Throttled and OOM-killed, but usage alone already asks more than today's requests.
        let mut c = app(1.0, 1024.0 * MIB as f64);
        c.throttled = true;
        c.oom_killed = true;
        c.oom_killed_at = Some(OomSeen::Killed(T));
        assert_eq!(said(&c), (vec![], vec![]));
        // Not throttled: no floor, whatever the request.
        assert_eq!(said(&app(0.2, 300.0 * MIB as f64)), (vec![], vec![]));
    }
}
