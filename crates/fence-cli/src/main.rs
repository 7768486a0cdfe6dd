//! The `fence` command. See docs/cli.md.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use fence_cli::exit::{shown, Failure, CHECK_FAILED, OK, STORE, USAGE};
use fence_cli::{
    breaking, check, demo, kv, names, probe, reaper, run, script, status, stores, terminal,
};

/// `println!` that ignores a closed stdout.
macro_rules! outln {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod args;

use args::{parse, Cmd};

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match cli.command {
        // The exec stage becomes the command: no runtime, no threads, nothing to inherit.
        Cmd::Exec {
            parent,
            foreground,
            command,
        } => ExitCode::from(reaper::exec_main(parent, foreground, &command)),
        Cmd::Reaper {
            role,
            supervisor,
            control_fd,
            report_fd,
            grace_ms,
            orphan_grace_ms,
            silence_ms,
            foreground,
            kill_at_boot_ms,
            deadline_fd,
            command,
        } => ExitCode::from(reaper::reaper_main(reaper::ReaperArgs {
            role,
            supervisor,
            control_fd,
            report_fd,
            grace: Duration::from_millis(grace_ms),
            orphan_grace: Duration::from_millis(orphan_grace_ms),
            silence: Duration::from_millis(silence_ms),
            foreground,
            kill: kill_at_boot_ms
                .zip(deadline_fd)
                .map(|(at, deadline_fd)| reaper::KillArgs { at, deadline_fd }),
            command,
        })),
        command => serve(command, cli.file_mode),
    }
}

fn serve(command: Cmd, file_mode: Option<u32>) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FENCE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let name = command.name();
    let lease = command.lease_name().map(str::to_owned);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    // `fence run` starts its supervising process from this (the main) thread: block_on polls
    // on the calling thread, and the child's parent-death signal follows the thread that
    // started it.
    let result = match runtime {
        Ok(rt) => rt.block_on(dispatch(command, file_mode)),
        Err(e) => Err(Failure::new(STORE, format!("cannot start: {e}"))),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            let f = match &lease {
                Some(lease) => f.eliding(lease),
                None => f,
            };
            if !f.message.is_empty() {
                eprintln!("fence {name}: {}", terminal::escape(&f.message));
            }
            ExitCode::from(f.code)
        }
    }
}

/// Serves the `metrics` facade's counters and histograms at `http://addr/metrics`.
fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), Failure> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    // Store requests take from a fraction of a millisecond (local files) to seconds (a slow
    // object store near its attempt timeout); without buckets the exporter renders a summary.
    const LATENCY_BUCKETS: [f64; 14] = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("fence_store_request_seconds".into()),
            &LATENCY_BUCKETS,
        )
        .map_err(|e| Failure::usage(format!("--metrics: {e}")))?
        .with_http_listener(addr)
        .install()
        .map_err(|e| {
            Failure::usage(format!(
                "--metrics {addr}: cannot serve metrics there ({e})"
            ))
        })
}

async fn dispatch(cmd: Cmd, file_mode: Option<u32>) -> Result<u8, Failure> {
    // Commands that only read open a file:// store read-only: it may be a read-only mount,
    // a snapshot, or a store this user can only read.
    let writing = stores::FileAccess {
        file_mode,
        read_only: false,
    };
    let reading = stores::FileAccess {
        file_mode,
        read_only: true,
    };
    match cmd {
        Cmd::Run {
            taking,
            grace,
            conflict_exit_code,
            fenced_exit_code,
            metrics,
            containment,
            probe,
            verbose,
            for_pid,
            command,
        } => {
            names::check_lease(&taking.lease)?;
            if let Some(addr) = metrics {
                serve_metrics(addr)?;
            }
            let store = stores::open_shared(&taking.store, Some(taking.ttl), writing)?;
            run::run(run::RunOptions {
                store,
                wait: taking.wait(),
                lease: taking.lease,
                ttl: taking.ttl,
                grace,
                quiet: taking.quiet,
                conflict_exit_code,
                fenced_exit_code,
                containment,
                limit: taking.limit,
                probe,
                verbose,
                for_pid,
                command,
            })
            .await
        }
        Cmd::Break {
            store,
            lease,
            force,
        } => {
            names::check_lease(&lease)?;
            let store = stores::open_shared(&store, None, writing)?;
            let broken =
                breaking::break_lease(&store.store, &lease, force, fence_core::now_ms()).await?;
            eprintln!(
                "fence break: {}",
                terminal::escape(&broken.describe(&lease))
            );
            Ok(OK)
        }
        Cmd::Acquire { taking, pid } => {
            // Read first: the script's pid and start time, before any wait.
            let script = script::script_of(pid)?;
            names::check_lease(&taking.lease)?;
            let opened = stores::open_shared(&taking.store, None, writing)?;
            let mut run_args = taking.run_args(&opened.url);
            if let Some(mode) = opened.file_mode {
                run_args.extend(["--file-mode".into(), format!("{mode:04o}")]);
            }
            let lines = script::acquire(&script::AcquireOptions {
                run_args,
                store_url: opened.url,
                script,
                file_mode: opened.file_mode,
            })?;
            outln!("{}", lines.trim_end());
            Ok(OK)
        }
        Cmd::Release {
            store,
            lease,
            holder,
            timeout,
        } => {
            names::check_lease(&lease)?;
            let store = stores::open_shared(&store, None, reading)?;
            script::release(&store.url, &lease, holder.as_deref(), timeout).await
        }
        Cmd::Put {
            store,
            lease,
            epoch,
            node,
            key,
            file,
            value,
        } => {
            names::check_lease(&lease)?;
            let store = stores::open_shared(&store, None, writing)?;
            let value = read_value(file.as_deref(), value)?;
            let node = node.unwrap_or_else(|| format!("put-{}", std::process::id()));
            kv::put(&store.store, &node, &lease, epoch, &key, &value).await?;
            Ok(OK)
        }
        Cmd::Get { store, lease, key } => {
            names::check_lease(&lease)?;
            let store = stores::open_shared(&store, None, reading)?;
            let value = kv::get(&store.store, &lease, &key)
                .await
                .map_err(|f| match f.code {
                    fence_cli::exit::NOT_FOUND => Failure::new(
                        f.code,
                        format!("no key {} in lease {}", shown(&key), shown(&lease)),
                    ),
                    _ => f,
                })?;
            write_stdout(&value)?;
            Ok(OK)
        }
        Cmd::Status {
            store,
            name,
            json,
            all,
        } => {
            // A named cell is shown whatever its state.
            let rows = if all || name.is_some() {
                status::Rows::All
            } else {
                status::Rows::Current
            };
            show_status(&store, name.as_deref(), json, rows, reading).await
        }
        Cmd::Probe { url, rounds, json } => run_probe(&url, rounds.into(), json, writing).await,
        Cmd::Check {
            store,
            prefix,
            json,
        } => run_check(&store, prefix.as_deref(), json, reading).await,
        Cmd::Demo {
            nodes,
            cells,
            ttl,
            store,
        } => run_demo(nodes.into(), cells as usize, ttl, store.as_deref(), writing).await,
        Cmd::Reaper { .. } | Cmd::Exec { .. } => Err(Failure::usage("internal subcommand")),
    }
}

fn read_value(file: Option<&str>, value: Option<String>) -> Result<Vec<u8>, Failure> {
    if let Some(v) = value {
        return Ok(v.into_bytes());
    }
    match file {
        None | Some("-") => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| Failure::usage(format!("cannot read stdin: {e}")))?;
            Ok(buf)
        }
        Some(path) => std::fs::read(path)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", shown(path)))),
    }
}

/// Writes a value: its bytes unchanged to a file or a pipe, escaped for a terminal
/// ([`terminal::printable`]) when stdout is one.
fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    use std::io::IsTerminal;
    let mut out = std::io::stdout().lock();
    let shown;
    let bytes = if out.is_terminal() {
        shown = terminal::printable(bytes);
        shown.as_bytes()
    } else {
        bytes
    };
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(USAGE, format!("cannot write stdout: {e}")))
}

async fn show_status(
    url: &str,
    name: Option<&str>,
    json: bool,
    rows: status::Rows,
    access: stores::FileAccess,
) -> Result<u8, Failure> {
    if let Some(name) = name {
        names::check_lease(name)?;
    }
    let store = stores::open_shared(url, None, access)?;
    let status = status::read(&store.store, &store.url, name).await?;
    if json {
        outln!("{}", terminal::json(&status));
    } else {
        outln!(
            "{}",
            terminal::escape_lines(status::table(&status, rows).trim_end())
        );
    }
    match status.bad.len() {
        0 => Ok(OK),
        n => Err(Failure::new(
            STORE,
            format!("{n} record(s) could not be read; every other record is listed"),
        )),
    }
}

async fn run_check(
    url: &str,
    prefix: Option<&str>,
    json: bool,
    access: stores::FileAccess,
) -> Result<u8, Failure> {
    let store = stores::open_shared(url, None, access)?;
    let mut report = check::check(&store.store, prefix).await?;
    report.store = store.url.clone();
    if json {
        outln!("{}", terminal::json(&report));
    } else {
        outln!(
            "{}",
            terminal::escape_lines(check::table(&report).trim_end())
        );
    }
    Ok(check::exit_code(&report))
}

async fn run_probe(
    url: &str,
    rounds: usize,
    json: bool,
    access: stores::FileAccess,
) -> Result<u8, Failure> {
    let store = stores::open_with(url, None, access)?;
    let report = probe::run(store.store.as_ref(), rounds, true).await;
    // A file store keeps the directories of deleted keys: remove the empty ones the probe made.
    let left_dirs = store.prune_dirs(&report.prefix);
    if json {
        let mut value = serde_json::to_value(probe::ProbeJson::from(&report))
            .map_err(|e| Failure::new(CHECK_FAILED, e.to_string()))?;
        value["left_dirs"] = serde_json::json!(left_dirs);
        outln!("{}", terminal::json(&value));
    } else {
        outln!("{}", terminal::escape_lines(&report.to_string()));
        for dir in &left_dirs {
            outln!("  left behind: directory {}", terminal::escape(dir));
        }
    }
    let code = probe::exit_code(&report.verdict);
    if code != OK {
        eprintln!(
            "fence probe: {}",
            terminal::escape(&report.verdict.to_string())
        );
    }
    Ok(code)
}

async fn run_demo(
    nodes: usize,
    cells: usize,
    ttl: Duration,
    store: Option<&str>,
    access: stores::FileAccess,
) -> Result<u8, Failure> {
    if nodes < 2 || cells == 0 {
        return Err(Failure::usage("needs at least 2 nodes and 1 cell"));
    }
    if ttl < Duration::from_millis(30) {
        return Err(Failure::usage("--ttl must be at least 30ms"));
    }
    let opened = stores::open_demo(store, access)?;
    let cfg = demo::DemoConfig {
        nodes,
        cells,
        ttl,
        store_label: opened.url.clone(),
    };
    let result = demo::run(opened.store.clone(), cfg).await;
    let ok = match result {
        Ok(ok) => ok,
        Err(e) => {
            if store.is_none() {
                opened.remove_dir();
            }
            return Err(e.into());
        }
    };
    if opened.url.starts_with("file://") {
        outln!("the store is kept: fence status --store {}", opened.url);
    }
    Ok(if ok { OK } else { CHECK_FAILED })
}
