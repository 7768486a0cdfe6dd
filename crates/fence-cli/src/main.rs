//! The `fence` command.

mod demo;
mod stores;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// fence: exactly one owner per resource, through an object store's conditional writes.
#[derive(Debug, Parser)]
#[command(name = "fence", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs a small fleet in one process: claims, a suspended node, takeover, rejected stale
    /// writes; exits non-zero if an invariant broke.
    ///
    /// Example: fence demo --nodes 3 --cells 8 --ttl 2s
    Demo {
        /// Fleet size.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Number of cells.
        #[arg(long, default_value_t = 8)]
        cells: usize,
        /// Lease TTL (e.g. 2s, 1500ms).
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// Store URL: file:///path (default: a fresh directory under ./.fence-demo) or memory://
        #[arg(long)]
        store: Option<String>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FENCE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Demo {
            nodes,
            cells,
            ttl,
            store,
        } => run_demo(nodes, cells, ttl, store).await,
    }
}

async fn run_demo(nodes: usize, cells: usize, ttl: Duration, store: Option<String>) -> ExitCode {
    if nodes < 2 || cells == 0 {
        eprintln!("fence demo: needs at least 2 nodes and 1 cell");
        return ExitCode::from(2);
    }
    let (store, label) = match stores::open_demo_store(store.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fence demo: {e}");
            return ExitCode::from(2);
        }
    };
    let cfg = demo::DemoConfig {
        nodes,
        cells,
        ttl,
        store_label: label,
    };
    match demo::run(store, cfg).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("fence demo: {e}");
            ExitCode::from(1)
        }
    }
}
