//! Reconcile counters for every controller in the process, in Prometheus' text format (served
//! by `lariat server` at `/metrics`). Counted from each controller's output stream, so a
//! reconcile is counted once whichever way it ends.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reconcile {
    controller: String,
    result: String,
}

static RECONCILES: LazyLock<Family<Reconcile, Counter>> = LazyLock::new(Family::default);

/// Counts one reconcile of `controller` (e.g. `machine`) that ended with `result`.
pub fn record<T, E>(controller: &str, result: &Result<T, E>) {
    RECONCILES
        .get_or_create(&Reconcile {
            controller: controller.to_string(),
            result: if result.is_ok() { "success" } else { "error" }.to_string(),
        })
        .inc();
}

/// Every counter, in Prometheus' text exposition format.
pub fn render() -> String {
    let mut registry = Registry::default();
    registry.register(
        "lariat_reconciles",
        "Reconciles finished, by controller and result",
        RECONCILES.clone(),
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("writing to a String cannot fail");
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_by_controller_and_result() {
        super::record::<(), ()>("test-kind", &Ok(()));
        super::record::<(), ()>("test-kind", &Ok(()));
        super::record::<(), ()>("test-kind", &Err(()));
        let text = super::render();
        assert!(
            text.contains(r#"lariat_reconciles_total{controller="test-kind",result="success"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"lariat_reconciles_total{controller="test-kind",result="error"} 1"#)
        );
    }
}
