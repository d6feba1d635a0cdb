//! Counting the worker's own requests to kube-apiserver on a cluster others use at the same time.
//!
//! `apiserver_request_total` has no user or namespace label, so it counts every tenant's pod LISTs.
//! The worker therefore runs as its own service account, and three FlowSchemas (API Priority and
//! Fairness) match only that account: its pod LISTs, its pod WATCHes, and everything else it sends.
//! `apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}` then counts exactly the
//! worker's requests as the apiserver dispatched them. The cluster-wide pod LIST and WATCH totals are
//! read too, as context. The counters live in the apiserver's memory: a restart resets them, which
//! `process_start_time_seconds` shows.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde::Serialize;

/// Suffixes of the FlowSchema names, one per class of request.
pub const CLASSES: [&str; 3] = ["list", "watch", "other"];

/// One reading of the apiserver's counters.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// `process_start_time_seconds`: changes when the apiserver restarts.
    pub started: f64,
    /// Dispatched requests per FlowSchema name.
    pub schemas: BTreeMap<String, f64>,
    /// `apiserver_request_total{verb="LIST",resource="pods"}`, every tenant.
    pub all_pod_lists: f64,
    /// `apiserver_request_total{verb="WATCH",resource="pods"}` (counted when a watch ends), every tenant.
    pub all_pod_watches: f64,
}

/// Requests between two readings.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Requests {
    /// The worker's pod LISTs.
    pub list: f64,
    /// The worker's pod WATCHes started.
    pub watch: f64,
    /// The worker's other requests (deletes by GC, discovery, ...).
    pub other: f64,
    /// Pod LISTs by every tenant of the cluster.
    pub all_pod_lists: f64,
    /// Pod WATCHes that ended, every tenant.
    pub all_pod_watches: f64,
    /// The apiserver restarted between the readings: counts are since that restart.
    pub restarted: bool,
}

fn label<'a>(series: &'a str, name: &str) -> Option<&'a str> {
    let start = series.find(&format!("{name}=\""))? + name.len() + 2;
    let len = series[start..].find('"')?;
    Some(&series[start..start + len])
}

/// Parses the metrics text.
pub fn parse(text: &str) -> Reading {
    let mut r = Reading::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if series == "process_start_time_seconds" {
            r.started = value;
        } else if series.starts_with("apiserver_flowcontrol_dispatched_requests_total{") {
            if let Some(fs) = label(series, "flow_schema") {
                *r.schemas.entry(fs.to_owned()).or_default() += value;
            }
        } else if series.starts_with("apiserver_request_total{")
            && label(series, "resource") == Some("pods")
            && label(series, "subresource") == Some("")
        {
            match label(series, "verb") {
                Some("LIST") => r.all_pod_lists += value,
                Some("WATCH") => r.all_pod_watches += value,
                _ => {}
            }
        }
    }
    r
}

/// Reads the counters through `client` (which may GET `/metrics`).
pub async fn read(client: &kube::Client) -> Result<Reading> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(req)
        .await
        .context("apiserver /metrics")?;
    Ok(parse(&text))
}

impl Reading {
    fn schema(&self, prefix: &str, class: &str) -> f64 {
        self.schemas
            .get(&format!("{prefix}-{class}"))
            .copied()
            .unwrap_or(0.0)
    }

    /// What happened from `self` to `later`, for the FlowSchemas named `prefix-<class>`.
    pub fn until(&self, later: &Reading, prefix: &str) -> Requests {
        let restarted = (later.started - self.started).abs() > 0.5;
        let d = |a: f64, b: f64| if restarted { b } else { b - a };
        Requests {
            list: d(self.schema(prefix, "list"), later.schema(prefix, "list")),
            watch: d(self.schema(prefix, "watch"), later.schema(prefix, "watch")),
            other: d(self.schema(prefix, "other"), later.schema(prefix, "other")),
            all_pod_lists: d(self.all_pod_lists, later.all_pod_lists),
            all_pod_watches: d(self.all_pod_watches, later.all_pod_watches),
            restarted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_worker_apart_from_other_tenants_and_sees_restarts() {
        let a = parse(concat!(
            "# HELP x\nprocess_start_time_seconds 1.7e+09\n",
            "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"s-list\",priority_level=\"workload-low\"} 10\n",
            "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"s-watch\",priority_level=\"workload-low\"} 1\n",
            "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 40\n",
            "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"log\",verb=\"GET\",version=\"v1\"} 3\n",
        ));
        let mut b = a.clone();
        *b.schemas.get_mut("s-list").expect("list") += 1.0;
        b.all_pod_lists += 7.0;
        let r = a.until(&b, "s");
        assert_eq!(
            (r.list, r.watch, r.other, r.all_pod_lists),
            (1.0, 0.0, 0.0, 7.0)
        );
        assert!(!r.restarted);
        b.started += 60.0;
        let r = a.until(&b, "s");
        assert!(r.restarted);
        assert_eq!(
            r.list, 11.0,
            "after a restart the count is since the restart"
        );
    }
}
