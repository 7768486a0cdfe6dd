//! The `fence` command's arguments (clap) and the one-line usage errors.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use fence_cli::exit::{BUSY, FENCED, USAGE};
use fence_cli::{reaper, run, stores, terminal};

/// fence: exactly one owner per resource, through an object store's conditional writes.
#[derive(Debug, Parser)]
#[command(
    name = "fence",
    version,
    about,
    after_help = "Example:\n  mkdir -p /tmp/locks\n  fence run --store file:///tmp/locks --lease backup --wait -- ./backup.sh\n\nExit codes and JSON shapes: docs/cli.md"
)]
pub(crate) struct Cli {
    /// Mode of the files a file:// store creates, in octal (default 0600); its directories
    /// get the matching execute bits (0660 → 0770): 0660 lets a group share a store.
    #[arg(long, global = true, env = "FENCE_FILE_MODE", value_name = "MODE",
          value_parser = stores::parse_file_mode)]
    pub(crate) file_mode: Option<u32>,
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

/// A duration flag: at most [`run::FOREVER`] (a century), so that no TTL, grace period or
/// wait overflows the millisecond arithmetic of the lease or of the supervising process.
fn duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d > run::FOREVER {
        return Err("longer than 100 years (for a wait without end, use --wait)".into());
    }
    Ok(d)
}

/// Which lease `run` and `acquire` take, and how they wait for it.
#[derive(Debug, clap::Args)]
pub(crate) struct Taking {
    /// Store URL: file:///path, s3://bucket/prefix, gs://bucket/prefix, az://container/prefix,
    /// dynamodb://table/prefix.
    #[arg(long, env = "FENCE_STORE")]
    pub(crate) store: String,
    /// The lease (cell) name.
    #[arg(long)]
    pub(crate) lease: String,
    /// Lease TTL: how long a paused or dead holder keeps others waiting.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub(crate) ttl: Duration,
    /// Wait for the lease instead of failing at once (exit 75); forever unless --timeout.
    #[arg(long)]
    pub(crate) wait: bool,
    /// Wait at most this long for the lease (implies --wait; 0s: do not wait).
    #[arg(long, value_parser = duration)]
    pub(crate) timeout: Option<Duration>,
    /// At most N holders at once: N slots NAME#0 … NAME#N-1, each with its own epoch; a run
    /// takes the first free one (FENCE_LEASE names it, FENCE_SLOT is its number).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) limit: Option<u32>,
    /// Say nothing on stderr while waiting.
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

impl Taking {
    /// How long to wait: `None` fails at once.
    pub(crate) fn wait(&self) -> Option<Duration> {
        self.timeout
            .or(self.wait.then_some(run::FOREVER))
            .filter(|limit| !limit.is_zero())
    }

    /// The arguments of a `fence run` that takes the same lease the same way, on the store
    /// `url` (`fence acquire`'s holder).
    pub(crate) fn run_args(&self, url: &str) -> Vec<String> {
        let mut args: Vec<String> = ["run", "--store", url, "--lease", &self.lease]
            .map(str::to_owned)
            .to_vec();
        args.extend([
            "--ttl".into(),
            humantime::format_duration(self.ttl).to_string(),
        ]);
        match self.timeout {
            Some(t) => args.extend([
                "--timeout".into(),
                humantime::format_duration(t).to_string(),
            ]),
            None if self.wait => args.push("--wait".into()),
            None => {}
        }
        if let Some(n) = self.limit {
            args.extend(["--limit".into(), n.to_string()]);
        }
        if self.quiet {
            args.push("--quiet".into());
        }
        args
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Holds a lease while a command runs; the command gets FENCE_EPOCH, FENCE_LEASE,
    /// FENCE_STORE and FENCE_NODE. Exits with the command's code; 75 if the lease is busy; 76
    /// if the lease was lost (the command's processes are ended). Without a command, holds the
    /// lease until a signal and prints its epoch.
    #[command(
        after_help = "Example:\n  fence run --store file:///tmp/locks --lease nightly --ttl 10s --timeout 5m -- sh -c 'echo epoch $FENCE_EPOCH; ./job.sh'\n  fence run --store file:///tmp/locks --lease maintenance &   # hold it; kill %1 to let go"
    )]
    Run {
        #[command(flatten)]
        taking: Taking,
        /// Time between SIGTERM and SIGKILL when the command's processes are ended.
        #[arg(long, default_value = "5s", value_parser = duration)]
        grace: Duration,
        /// The exit code when the lease is busy.
        #[arg(long, default_value_t = BUSY, value_name = "CODE")]
        conflict_exit_code: u8,
        /// The exit code when the lease is lost while the command runs.
        #[arg(long, default_value_t = FENCED, value_name = "CODE")]
        fenced_exit_code: u8,
        /// Serve fence's metrics in the Prometheus text format at http://ADDR/metrics while
        /// running (off by default).
        #[arg(long, value_name = "ADDR")]
        metrics: Option<std::net::SocketAddr>,
        /// How the command's processes are held: auto (in a PID namespace of their own where
        /// the kernel allows one, else tracked, with a warning), required (a namespace or
        /// exit 126), fallback (tracked: no namespace).
        #[arg(
            long,
            env = "FENCE_CONTAINMENT",
            default_value = "auto",
            value_name = "MODE"
        )]
        containment: fence_cli::contain::Containment,
        /// Run the contract probe first and refuse a store that does not honour conditional
        /// writes (exit 1) before anything is taken.
        #[arg(long)]
        probe: bool,
        /// Say on stderr which lease and epoch were acquired (said anyway after a wait).
        #[arg(long, short)]
        verbose: bool,
        /// Hold the lease for this process, `PID` or `PID:START` (its start time, so a reused
        /// pid is never taken for it) (`fence acquire`'s holder; internal).
        #[arg(long, hide = true, value_name = "PID[:START]",
              value_parser = fence_cli::script::parse_watched)]
        for_pid: Option<fence_cli::script::Watched>,
        /// The command and its arguments, after `--` (none: hold the lease until a signal).
        #[arg(last = true, num_args = 0.., value_parser = clap::value_parser!(OsString))]
        command: Vec<OsString>,
    },
    /// Releases a lease whose holder you know is dead, now: its node lease and its cell
    /// (the next claim takes epoch + 1). A holder that looks alive needs --force. Says on
    /// stderr what it did.
    #[command(
        after_help = "Example:\n  fence break --store file:///tmp/locks --lease nightly\n  fence break --store s3://ops/locks --lease billing --force   # its holder renews, but you know better"
    )]
    Break {
        /// Store URL.
        #[arg(long, env = "FENCE_STORE")]
        store: String,
        /// The lease (cell) name.
        #[arg(long)]
        lease: String,
        /// Break it also when its holder's lease record has not expired.
        #[arg(long)]
        force: bool,
    },
    /// Takes a lease for a section of a shell script and prints FENCE_EPOCH and the other
    /// FENCE_* variables for eval; a background holder keeps it until `fence release` or
    /// until the script ends.
    #[command(
        after_help = "Example:\n  eval \"$(fence acquire --store file:///tmp/locks --lease nightly --timeout 1m)\" || exit\n  fence put last-run --value \"$(date)\"   # fenced by $FENCE_EPOCH\n  fence release"
    )]
    Acquire {
        #[command(flatten)]
        taking: Taking,
        /// The script's process, whose end releases the lease (default: the parent process).
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        pid: Option<i32>,
    },
    /// Releases a lease `fence acquire` took in this script: exit 0 if its holder held it to
    /// the end, 76 if it was lost meanwhile. Signals only the holder FENCE_HOLDER proves;
    /// refuses (exit 2) without that proof.
    #[command(after_help = "Example:\n  fence release   # after eval \"$(fence acquire …)\"")]
    Release {
        /// Store URL.
        #[arg(long, env = "FENCE_STORE")]
        store: String,
        /// The lease (cell) name (a slot's own name with --limit).
        #[arg(long, env = "FENCE_LEASE")]
        lease: String,
        /// The holder's token, as `fence acquire` exports it (default: FENCE_HOLDER).
        #[arg(
            long,
            env = "FENCE_HOLDER",
            value_name = "TOKEN",
            hide_env_values = true
        )]
        holder: Option<String>,
        /// How long to wait for the holder to let go.
        #[arg(long, default_value = "30s", value_parser = duration)]
        timeout: Duration,
    },
    /// A fenced write of KEY in the lease's data: refused (exit 76) when EPOCH is no longer
    /// current. Reads the value from FILE, `-` (stdin, the default) or --value.
    #[command(
        after_help = "Example (inside `fence run`, which sets FENCE_STORE, FENCE_LEASE, FENCE_EPOCH):\n  fence put state ./state.json\n  fence put --store file:///tmp/locks --lease nightly --epoch 7 last-run --value 2026-01-01"
    )]
    Put {
        /// Store URL.
        #[arg(long, env = "FENCE_STORE")]
        store: String,
        /// The lease (cell) name.
        #[arg(long, env = "FENCE_LEASE")]
        lease: String,
        /// The epoch the write is made under.
        #[arg(long, env = "FENCE_EPOCH")]
        epoch: u64,
        /// The writer's name recorded with the data (default: put-PID).
        #[arg(long, env = "FENCE_NODE")]
        node: Option<String>,
        /// The key.
        key: String,
        /// A file with the value, or `-` for stdin.
        #[arg(conflicts_with = "value")]
        file: Option<String>,
        /// The value as text.
        #[arg(long)]
        value: Option<String>,
    },
    /// Prints KEY's value from the lease's data (exit 3 if absent).
    #[command(
        after_help = "Example:\n  fence get --store file:///tmp/locks --lease nightly last-run"
    )]
    Get {
        /// Store URL.
        #[arg(long, env = "FENCE_STORE")]
        store: String,
        /// The lease (cell) name.
        #[arg(long, env = "FENCE_LEASE")]
        lease: String,
        /// The key.
        key: String,
    },
    /// Shows who holds which lease: cells with their holder (node, address), epoch and expiry,
    /// then node leases holding no cell. Released ones only with --all (or NAME).
    #[command(
        after_help = "Example:\n  fence status --store file:///tmp/locks\n  fence status --store file:///tmp/locks --all\n  fence status --store file:///tmp/locks nightly --json"
    )]
    Status {
        /// Store URL.
        #[arg(long, env = "FENCE_STORE")]
        store: String,
        /// Only this lease (cell).
        name: Option<String>,
        /// Stable JSON instead of a table (shape: docs/cli.md); always every record.
        #[arg(long)]
        json: bool,
        /// Also released cells and node leases (the table hides them by default).
        #[arg(long)]
        all: bool,
    },
    /// Checks every record under the store (and --prefix) against the wire protocol
    /// (docs/protocol.md) and names each violation: key, field, rule. Exit 0 if every record
    /// conforms, 1 if any violates it, 69 if the store could not be read.
    #[command(
        after_help = "Example:\n  fence check --store file:///tmp/locks\n  fence check --store s3://bucket/fence --json"
    )]
    Check {
        /// Store URL.
        #[arg(long, env = "FENCE_STORE")]
        store: String,
        /// The key prefix the fleet writes under (FenceBuilder::prefix), if any.
        #[arg(long)]
        prefix: Option<String>,
        /// Print the report as JSON (shape: docs/cli.md).
        #[arg(long)]
        json: bool,
    },
    /// Checks that a store honours conditional writes: exit 0 only if it is honest, 1 if it
    /// violates the contract, 69 if the probe could not tell.
    #[command(
        after_help = "Example:\n  fence probe file:///tmp/locks\n  AWS_ENDPOINT=http://127.0.0.1:9000 AWS_ALLOW_HTTP=true fence probe s3://bucket/fence --rounds 10 --json"
    )]
    Probe {
        /// Store URL.
        url: String,
        /// Rounds of each concurrent race (at least 1).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
        /// Print the report as JSON (shape: docs/cli.md).
        #[arg(long)]
        json: bool,
    },
    /// Runs a small fleet in one process: claims, a suspended node, takeover, rejected stale
    /// writes; exits non-zero if an invariant broke.
    #[command(after_help = "Example:\n  fence demo --nodes 3 --cells 8 --ttl 2s")]
    Demo {
        /// Fleet size (2 to 1000: a small fleet in one process).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..=1000))]
        nodes: u16,
        /// Number of cells (1 to 100000).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        cells: u32,
        /// Lease TTL (e.g. 2s, 1500ms).
        #[arg(long, default_value = "2s", value_parser = duration)]
        ttl: Duration,
        /// Store URL (default: local files in a fresh temporary directory, kept afterwards).
        #[arg(long)]
        store: Option<String>,
    },
    /// The supervising process of `fence run` (internal).
    #[command(name = "__reaper", hide = true)]
    Reaper {
        #[arg(long)]
        role: reaper::Role,
        #[arg(long)]
        supervisor: i32,
        #[arg(long)]
        control_fd: i32,
        #[arg(long)]
        report_fd: i32,
        #[arg(long)]
        grace_ms: u64,
        #[arg(long)]
        orphan_grace_ms: u64,
        #[arg(long)]
        silence_ms: u64,
        #[arg(long)]
        foreground: bool,
        #[arg(long, requires = "deadline_fd")]
        kill_at_boot_ms: Option<u64>,
        #[arg(long, requires = "kill_at_boot_ms")]
        deadline_fd: Option<i32>,
        #[arg(last = true, num_args = 1.., value_parser = clap::value_parser!(OsString))]
        command: Vec<OsString>,
    },
    /// The exec stage of `fence run`'s command (internal).
    #[command(name = "__exec", hide = true)]
    Exec {
        #[arg(long)]
        parent: i32,
        #[arg(long)]
        foreground: bool,
        #[arg(last = true, num_args = 1.., value_parser = clap::value_parser!(OsString))]
        command: Vec<OsString>,
    },
}

impl Cmd {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            // `fence acquire`'s holder speaks as `fence acquire`.
            Cmd::Run {
                for_pid: Some(_), ..
            } => "acquire",
            Cmd::Run { .. } => "run",
            Cmd::Put { .. } => "put",
            Cmd::Get { .. } => "get",
            Cmd::Status { .. } => "status",
            Cmd::Probe { .. } => "probe",
            Cmd::Check { .. } => "check",
            Cmd::Demo { .. } => "demo",
            Cmd::Break { .. } => "break",
            Cmd::Acquire { .. } => "acquire",
            Cmd::Release { .. } => "release",
            Cmd::Reaper { .. } | Cmd::Exec { .. } => "run",
        }
    }

    /// The lease name the user gave, if the command has one.
    pub(crate) fn lease_name(&self) -> Option<&str> {
        match self {
            Cmd::Run { taking, .. } | Cmd::Acquire { taking, .. } => Some(&taking.lease),
            Cmd::Put { lease, .. }
            | Cmd::Get { lease, .. }
            | Cmd::Break { lease, .. }
            | Cmd::Release { lease, .. } => Some(lease),
            Cmd::Status { name, .. } => name.as_deref(),
            _ => None,
        }
    }
}

/// Parses the arguments. A usage error is one line on stderr: clap's reason and its tips
/// ("a similar argument exists: '--ttl'", "to pass 'x' as a value, use '-- x'") without its
/// usage block, a user-supplied value in it cut short; exit 2.
pub(crate) fn parse() -> Result<Cli, ExitCode> {
    use clap::error::ErrorKind as Clap;
    match Cli::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) if matches!(e.kind(), Clap::DisplayHelp | Clap::DisplayVersion) => e.exit(),
        Err(e) if e.kind() == Clap::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        Err(e) => {
            let mut line = usage_line(&e.render().to_string());
            if let Some(tip) = command_tip(&e) {
                line = format!("{line}; {tip}");
            }
            eprintln!("fence: {} (see fence --help)", terminal::escape(&line));
            Err(ExitCode::from(USAGE))
        }
    }
}

/// `fence run --lease x true`: clap sees an unexpected `true` (the command belongs after
/// `--`) and gives no tip for it.
fn command_tip(e: &clap::Error) -> Option<&'static str> {
    use clap::error::{ContextKind, ContextValue, ErrorKind as Clap};
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let run = std::env::args().nth(1).is_some_and(|a| a == "run");
    (e.kind() == Clap::UnknownArgument && run && !arg.starts_with('-')).then_some(
        "tip: the command to run goes after `--`: fence run --store URL --lease NAME -- CMD ARGS",
    )
}

/// clap's rendered error as one line: its first paragraph (the reason) and every `tip:` line.
fn usage_line(rendered: &str) -> String {
    let reason = rendered.split("\n\n").next().unwrap_or_default();
    let reason = reason.trim().trim_start_matches("error:");
    let tips = rendered
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("tip:"));
    let parts: Vec<String> = std::iter::once(reason)
        .chain(tips)
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    parts.join("; ").chars().take(400).collect()
}
