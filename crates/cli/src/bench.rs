//! `lariat bench`: prints throughput and latency figures for a running workload.

#[derive(clap::Subcommand)]
pub enum BenchCommand {}

pub async fn run(what: BenchCommand) -> anyhow::Result<()> {
    match what {}
}
