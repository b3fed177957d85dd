//! `weir serve` and `weir check`: load and validate the config (before any
//! port is bound), bind everything, run until a signal, drain.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use nix::sys::signal::{SigSet, SigmaskHow, Signal as NixSignal, pthread_sigmask};
use tokio::signal::unix::{Signal, SignalKind, signal};
use weir_config::{Config, KeyPath};
use weir_core::Shutdown;
use weir_observe::Metrics;
use weir_origin::{Origin, OriginOptions};
use weir_proxy::Proxy;

use crate::cli::{CheckArgs, ServeArgs};
use crate::{systemd, upgrade};

pub fn check(args: &CheckArgs) -> ExitCode {
    // Validation, then the files the config names (certificates, keys, CAs).
    let loaded = weir_config::load_file(&args.file).and_then(|config| {
        // Warnings (an expired certificate, say) go to standard error; the rest of the
        // log is weir serving, not checking.
        crate::logging::init(&weir_config::Log {
            level: "warn".to_owned(),
            ..config.log.clone()
        });
        Proxy::check(&config)?;
        Ok(config)
    });
    // The warnings (written by the log's own thread) come before the verdict.
    crate::logging::flush();
    match loaded {
        Ok(config) => {
            println!(
                "{}: ok (virtual servers: {}, pools: {})",
                args.file.display(),
                config.virtual_servers.len(),
                config.pools.len()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::from(2)
        }
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    if args.print_default {
        print!("{}", weir_config::EMBEDDED_DEFAULT);
        return Ok(());
    }
    // SIGHUP, SIGUSR1 and SIGUSR2 wait (blocked, not lost) until their handlers are in
    // place (`serve`): one sent while the configuration is read would otherwise end the
    // process, their default action.
    hold_operator_signals(SigmaskHow::SIG_BLOCK);
    let config = match &args.config {
        // A refused configuration stays a ConfigError, which `main` exits with 2 for, as
        // `weir check` does.
        Some(path) => weir_config::load_file(path)?,
        None => weir_config::embedded_default(),
    };
    crate::logging::init(&config.log);
    raise_descriptor_limit(&config);
    let threads = args
        .threads
        .map(usize::from)
        .or(config.runtime.threads.map(|n| n.get() as usize));
    let runtime = runtime(threads)?;
    let result = runtime.block_on(serve(config, args.upgrade, args.pid_file));
    // Work still running on a blocking thread (a reload waiting on a slow file or name
    // server) does not hold the exit: a second signal means now.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

/// The tokio runtime: `threads` workers (default: one per core); a single
/// thread runs the current-thread scheduler.
pub fn runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    // One thread needs no work stealing: the current-thread scheduler does
    // the same work with less bookkeeping per task wake-up.
    let mut builder = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all().thread_name("weir-worker");
    if let Some(threads) = threads.filter(|&n| n > 1) {
        builder.worker_threads(threads);
    }
    builder.build().context("cannot start the runtime")
}

/// What `weir serve` binds (or takes over) before anything serves.
struct Bound {
    proxy: weir_proxy::BoundProxy,
    origins: Vec<Origin>,
    admin: Option<std::net::TcpListener>,
    upgrade: std::os::unix::net::UnixListener,
    /// Set when this process took the sockets over from a running weir.
    inherited: Option<upgrade::Inherited>,
}

async fn serve(config: Config, take_over: bool, pid_file: Option<PathBuf>) -> anyhow::Result<()> {
    // Before anything binds or is announced (see `wait_for_signal`), and before the start's
    // slow parts (files, name lookups): from here on no signal weir handles kills it.
    // An upgrade's READY is not sent after a stop signal: this flag sees one at once. Set up
    // before the listeners below, so that every signal they see, it sees.
    let stop_flag = take_over.then(upgrade::stop_flag).transpose()?;
    let mut first_signal = std::pin::pin!(wait_for_signal());
    let signals = Signals::register()?;
    // `block_on` runs this on the thread `run` blocked the signals on: one that came
    // meanwhile is delivered now, to its handler.
    hold_operator_signals(SigmaskHow::SIG_UNBLOCK);
    let metrics = Metrics::new();
    // Two stages: the proxy drains first; the admin listener (which reports
    // "draining" meanwhile) and the built-in origins stop once it is done.
    let (shutdown, signal) = Shutdown::new();
    let (after_drain, after_drain_signal) = Shutdown::new();
    let (admin_stop, admin_signal) = Shutdown::new();

    let bound = bind(&config, &metrics, take_over).await?;
    let (admin_dup, upgrade_dup) = copies_for_a_successor(&bound)?;
    // Everything is bound: the file says weir serves. Written before an upgrade tells the
    // old process to drain, so a file that cannot be written leaves that one serving.
    let _pid_file = pid_file.map(|path| PidFile::write(&path)).transpose()?;
    let proxy = bound.proxy;
    // The API's token is read before anything serves: weir refuses to start without it.
    let control = match &config.admin {
        Some(_) => Some(Arc::new(
            weir_admin::Control::new(proxy.live())
                .map_err(|error| anyhow::anyhow!("admin.token_file: {error}"))?,
        )),
        None => None,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for origin in bound.origins {
        tracing::info!(name = origin.name(), listen = %origin.local_addr(), "built-in origin serving");
        let signal = after_drain_signal.clone();
        tasks.spawn(async move { origin.run(signal).await.context("origin") });
    }
    let draining = Arc::new(AtomicBool::new(false));
    if let Some(listener) = bound.admin {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        proxy.live().set_admin_listen(listener.local_addr()?);
        tracing::info!(listen = %listener.local_addr()?, "admin serving");
        let draining = Arc::clone(&draining);
        let state = weir_admin::AdminState {
            control: control.clone(),
            ..weir_admin::AdminState::new(
                Arc::clone(&metrics),
                Arc::new(move || !draining.load(Ordering::Relaxed)),
            )
        };
        tasks.spawn(async move {
            weir_admin::serve(listener, state, admin_signal)
                .await
                .context("admin")
        });
    }
    let mut virtual_servers = std::collections::HashSet::new();
    for (name, address) in proxy.local_addrs() {
        tracing::info!(virtual_server = %name, listen = %address, "virtual server serving");
        virtual_servers.insert(name);
    }
    // Reload, reopen, ignore: none of these may end the process (their default action does).
    signals.spawn(&mut tasks, &proxy.live(), &after_drain_signal);
    let handover = upgrade::Handover {
        live: proxy.live(),
        admin: admin_dup,
        upgrade: upgrade_dup,
    };
    bound.upgrade.set_nonblocking(true)?;
    let upgrade_listener = tokio::net::UnixListener::from_std(bound.upgrade)?;
    let mut handed_over = tokio::spawn(upgrade::serve(upgrade_listener, handover, signal.clone()));
    let proxy_task = tokio::spawn(async move { proxy.run(signal).await });
    if let (Some(inherited), Some(stop)) = (bound.inherited, stop_flag) {
        hold_before_ready().await;
        let ready = tokio::task::spawn_blocking(move || inherited.ready(&stop))
            .await?
            .context("binary upgrade")?;
        if !ready {
            return cancel_upgrade(&shutdown, proxy_task).await;
        }
        tracing::info!("binary upgrade: took over from the previous process");
    }
    systemd::ready(virtual_servers.len());
    systemd::spawn_watchdog(after_drain_signal.clone());

    let successor = tokio::select! {
        () = &mut first_signal => None,
        done = &mut handed_over => done.ok().flatten(),
    };
    if let Some(pid) = successor {
        systemd::handed_over(pid);
        // The new process answers the admin listener now.
        admin_stop.trigger();
    } else {
        systemd::stopping();
        tracing::info!("shutting down: no new connections, draining open ones");
    }
    draining.store(true, Ordering::Relaxed);
    shutdown.trigger();
    // A second signal stops at once.
    tokio::select! {
        result = proxy_task => result.context("proxy task")?.context("proxy")?,
        _ = wait_for_signal() => {
            tracing::warn!("second signal: exiting without waiting for the drain");
            return Ok(());
        }
    }
    after_drain.trigger();
    admin_stop.trigger();
    while let Some(result) = tasks.join_next().await {
        result.context("task")??;
    }
    tracing::info!("stopped");
    Ok(())
}

/// An address weir cannot listen on: placed like a configuration error, but the file is
/// valid, so not a `ConfigError` (exit code 1, not `weir check`'s 2).
fn listen_error(error: weir_config::ConfigError) -> anyhow::Error {
    anyhow::anyhow!("{error}")
}

/// Copies of the admin listener and the upgrade socket for a successor (`weir serve
/// --upgrade`), made before anything is announced as serving: a process out of file
/// descriptors fails its start here, saying which, instead of after "serving".
fn copies_for_a_successor(
    bound: &Bound,
) -> anyhow::Result<(Option<(SocketAddr, OwnedFd)>, OwnedFd)> {
    let out_of_descriptors = "out of file descriptors? raise the open-file limit (ulimit -n)";
    let admin = bound
        .admin
        .as_ref()
        .map(|listener| {
            anyhow::Ok((
                listener.local_addr()?,
                listener.as_fd().try_clone_to_owned()?,
            ))
        })
        .transpose()
        .with_context(|| {
            format!(
                "admin.listen: cannot keep a copy of the admin listener for binary upgrades \
                 ({out_of_descriptors})"
            )
        })?;
    let upgrade = bound.upgrade.as_fd().try_clone_to_owned().with_context(|| {
        format!("runtime.upgrade_socket: cannot keep a copy of the upgrade socket ({out_of_descriptors})")
    })?;
    Ok((admin, upgrade))
}

/// Binds everything first (any address in use fails before anything serves), or takes the
/// sockets over from the running weir with `take_over`.
async fn bind(config: &Config, metrics: &Arc<Metrics>, take_over: bool) -> anyhow::Result<Bound> {
    if take_over && !config.origins.is_empty() {
        anyhow::bail!(
            "origins: built-in origins cannot be handed over in a binary upgrade; run them \
             as separate `weir origin` processes"
        );
    }
    // An upgrade takes the sockets and the persistence key over before the pools are
    // built (they sign cookies with that key); the old process serves on until this one
    // says it is ready, so a failure below leaves it serving.
    let mut inherited = if take_over {
        let config = config.clone();
        Some(tokio::task::spawn_blocking(move || upgrade::take_over(&config)).await??)
    } else {
        None
    };
    // Read every file the config names before any port is bound.
    let proxy = Proxy::build(config, metrics)?;
    // TLS state handed over for virtual servers the first model does not have is dropped,
    // so that none is taken by one a later reload adds, its age having stopped counting.
    let dropped = weir_tls::carry::forget_unclaimed();
    if dropped > 0 {
        tracing::info!(
            virtual_servers = dropped,
            "binary upgrade: TLS sessions of virtual servers this configuration does not have were dropped"
        );
    }
    // A fresh start claims the upgrade socket first: a second weir of the same config
    // stops here, with the reason, before it tries any port.
    let fresh_upgrade = match take_over {
        true => None,
        false => Some(upgrade::bind(config)?),
    };
    let mut origins = Vec::new();
    for (index, origin) in config.origins.iter().enumerate() {
        let options = OriginOptions {
            max_connections: origin.max_connections.map(|n| n.get()),
            keep_alive: origin.keep_alive,
            ..OriginOptions::new(origin.name.clone(), origin.listen)
        };
        let key = KeyPath::root().key("origins").index(index).key("listen");
        let bound = Origin::bind(options)
            .await
            .map_err(|error| listen_error(config.listen_error(&key, origin.listen, &error)))?;
        origins.push(bound);
    }
    let mut inherited_listeners = inherited
        .as_mut()
        .map(|i| std::mem::take(&mut i.listeners))
        .unwrap_or_default();
    let proxy = proxy.bind_listeners_inheriting(&mut inherited_listeners)?;
    let inherited_admin = inherited.as_mut().and_then(|i| i.admin.take());
    let admin = match &config.admin {
        Some(admin) => Some(match inherited_admin {
            Some((address, fd)) if address == admin.listen => weir_proxy::adopt(fd, 128)?,
            _ => weir_proxy::bind_tcp(admin.listen, 128).map_err(|error| {
                let key = KeyPath::root().key("admin").key("listen");
                listen_error(config.listen_error(&key, admin.listen, &error))
            })?,
        }),
        None => None,
    };
    let upgrade = match (
        fresh_upgrade,
        inherited.as_mut().and_then(|i| i.upgrade.take()),
    ) {
        (Some(listener), _) => listener,
        (None, Some(fd)) => std::os::unix::net::UnixListener::from(fd),
        (None, None) => anyhow::bail!("the running weir did not hand its upgrade socket over"),
    };
    Ok(Bound {
        proxy,
        origins,
        admin,
        upgrade,
        inherited,
    })
}

/// SIGHUP reloads the configuration in place: the file and every certificate, key and CA
/// it names are re-read and validated, then the new model is swapped in (see
/// `weir_proxy::Live`); a refused candidate is logged and the running one keeps serving.
/// Also refreshes the days-until-expiry gauges twice an hour.
async fn reload_on_sighup(
    live: Arc<weir_proxy::Live>,
    mut hangup: Signal,
    stop: weir_core::ShutdownSignal,
) -> anyhow::Result<()> {
    let mut refresh = tokio::time::interval(std::time::Duration::from_secs(30 * 60));
    refresh.tick().await;
    loop {
        tokio::select! {
            () = stop.triggered() => return Ok(()),
            _ = refresh.tick() => {
                for termination in live.current().tls_terminations() {
                    termination.refresh_expiry();
                }
            }
            received = hangup.recv() => {
                if received.is_none() {
                    return Ok(());
                }
                tracing::info!("SIGHUP: reloading the configuration");
                systemd::reloading();
                let live = Arc::clone(&live);
                // Reading files and building the model is blocking work: keep it off
                // the workers that serve traffic. The outcome is logged and counted
                // by the reload itself. A stop does not wait for it.
                let reload = tokio::task::spawn_blocking(move || live.reload_file());
                tokio::select! {
                    outcome = reload => systemd::reloaded(&match outcome {
                        Ok(Ok(_)) => "serving; the configuration was reloaded".to_owned(),
                        Ok(Err(error)) => format!(
                            "serving the previous configuration: the reload was refused ({})",
                            first_line(&error.to_string())
                        ),
                        Err(_) => "serving the previous configuration: the reload failed".to_owned(),
                    }),
                    () = stop.triggered() => return Ok(()),
                }
            }
        }
    }
}

/// The first line of `text` (a refused config lists one error per line).
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Writes the access log out 200 ms after a line arrives in an empty buffer (so the lines
/// of that moment go out together, and an idle weir has no timer to wake for), reopens its
/// file on SIGUSR1 (after logrotate moved it), and writes out the rest when weir stops.
async fn access_log_upkeep(
    live: Arc<weir_proxy::Live>,
    mut reopen: Signal,
    stop: weir_core::ShutdownSignal,
) -> anyhow::Result<()> {
    const GATHER: std::time::Duration = std::time::Duration::from_millis(200);
    // When the lines gathered since one landed in an empty buffer go out. The wait is a
    // branch of the loop, not a pause in it: a SIGUSR1 during it reopens the file at once
    // (it waited out the gathering before, and under steady load, when lines land again
    // right after each write-out, one gathering after another: records sent after the
    // signal went to the renamed file, or were lost with it when logrotate compressed it).
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            biased;
            () = stop.triggered() => {
                live.flush_access_log();
                return Ok(());
            }
            received = reopen.recv() => {
                if received.is_none() {
                    return Ok(());
                }
                match live.reopen_access_log() {
                    Ok(()) => tracing::info!("SIGUSR1: access log reopened"),
                    Err(error) => tracing::error!(%error, "SIGUSR1: cannot reopen the access log; still writing to the old file"),
                }
            }
            () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                due = None;
                live.hand_over_access_log();
            }
            () = weir_observe::access::appended(), if due.is_none() => {
                // Gather the lines of this moment.
                due = Some(tokio::time::Instant::now() + GATHER);
            }
        }
    }
}

/// Blocks or unblocks SIGHUP, SIGUSR1 and SIGUSR2 on the calling thread (threads started
/// while they are blocked keep them blocked; the process's signals then go to the one
/// that unblocked them).
fn hold_operator_signals(how: SigmaskHow) {
    let mut set = SigSet::empty();
    for held in [NixSignal::SIGHUP, NixSignal::SIGUSR1, NixSignal::SIGUSR2] {
        set.add(held);
    }
    if let Err(error) = pthread_sigmask(how, Some(&set), None) {
        tracing::warn!(%error, "cannot change the signal mask");
    }
}

/// Raises the soft open-file limit to the hard one (every client and node connection is
/// a descriptor; a supervisor's default soft limit, often 1024, would stop accepts far
/// below `max_connections`), and warns when even that is below what the configuration
/// may hold open: each virtual server's `max_connections` and each node's.
fn raise_descriptor_limit(config: &Config) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        tracing::debug!(from = soft, to = hard, "open-file limit raised");
        hard
    } else {
        soft
    };
    let clients: u64 = config
        .virtual_servers
        .iter()
        .map(|vs| u64::from(vs.limits.max_connections))
        .sum();
    let nodes: u64 = config
        .pools
        .iter()
        .map(|pool| pool.nodes.len() as u64 * u64::from(pool.connections.max_connections.get()))
        .sum();
    // Listeners, log files, the admin API, name lookups.
    let wanted = clients + nodes + 64;
    if limit < wanted {
        tracing::warn!(
            limit,
            wanted,
            "the open-file limit is below what the configuration may hold open (every \
             virtual server's and every node's max_connections): past it accepts fail; raise \
             it (LimitNOFILE= in a systemd unit, ulimit -n) or lower max_connections"
        );
    }
}

/// `--pid-file`: this process's id, written (whole, by a rename) once every listener is
/// bound, and removed at exit unless another process, a binary upgrade's, wrote its own
/// id there since.
struct PidFile {
    path: PathBuf,
    pid: String,
}

impl PidFile {
    fn write(path: &Path) -> anyhow::Result<PidFile> {
        let pid = std::process::id().to_string();
        let mut partial = path.as_os_str().to_owned();
        partial.push(format!(".{pid}.tmp"));
        let partial = PathBuf::from(partial);
        std::fs::write(&partial, format!("{pid}\n"))
            .and_then(|()| std::fs::rename(&partial, path))
            .map_err(|error| {
                let _ = std::fs::remove_file(&partial);
                anyhow::anyhow!("--pid-file {}: {error}", path.display())
            })?;
        Ok(PidFile {
            path: path.to_owned(),
            pid,
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.path).is_ok_and(|text| text.trim() == self.pid);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// For the commands that have nothing to reload or reopen (`weir tunnel`, `weir origin`):
/// SIGHUP, SIGUSR1 and SIGUSR2, which a log rotation or a reload of `weir serve` on the
/// same host may send every weir, are logged and ignored instead of ending the process.
/// Call within the runtime.
pub fn ignore_operator_signals(command: &'static str) -> anyhow::Result<()> {
    let mut hangup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
    let mut user1 = signal(SignalKind::user_defined1()).context("cannot listen for SIGUSR1")?;
    let mut user2 = signal(SignalKind::user_defined2()).context("cannot listen for SIGUSR2")?;
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                Some(()) = hangup.recv() => "SIGHUP",
                Some(()) = user1.recv() => "SIGUSR1",
                Some(()) = user2.recv() => "SIGUSR2",
                else => return,
            };
            tracing::info!("{name} ignored: {command} has nothing to reload or reopen");
        }
    });
    Ok(())
}

/// The signals weir acts on besides the stop (SIGHUP: reload; SIGUSR1: reopen the access
/// log; SIGUSR2: logged and ignored), registered together at the start so that none of
/// them kills a process that is still starting (their default action ends it).
struct Signals {
    hangup: Signal,
    reopen: Signal,
    user2: Signal,
}

impl Signals {
    /// Their tasks, until `stop`.
    fn spawn(
        self,
        tasks: &mut tokio::task::JoinSet<anyhow::Result<()>>,
        live: &Arc<weir_proxy::Live>,
        stop: &weir_core::ShutdownSignal,
    ) {
        tasks.spawn(reload_on_sighup(
            Arc::clone(live),
            self.hangup,
            stop.clone(),
        ));
        tasks.spawn(access_log_upkeep(
            Arc::clone(live),
            self.reopen,
            stop.clone(),
        ));
        tasks.spawn(ignore_sigusr2(self.user2, stop.clone()));
    }

    fn register() -> anyhow::Result<Signals> {
        Ok(Signals {
            hangup: signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?,
            reopen: signal(SignalKind::user_defined1()).context("cannot listen for SIGUSR1")?,
            user2: signal(SignalKind::user_defined2()).context("cannot listen for SIGUSR2")?,
        })
    }
}

/// SIGUSR2 is nginx's binary upgrade; weir's is `weir serve --upgrade`. It is logged and
/// otherwise ignored rather than left to end the process.
async fn ignore_sigusr2(mut user2: Signal, stop: weir_core::ShutdownSignal) -> anyhow::Result<()> {
    loop {
        tokio::select! {
            () = stop.triggered() => return Ok(()),
            received = user2.recv() => {
                if received.is_none() {
                    return Ok(());
                }
                tracing::warn!("SIGUSR2 ignored: a binary upgrade is `weir serve --config FILE --upgrade`");
            }
        }
    }
}

/// A stop signal that came while this process started cancels the upgrade: the old process,
/// never told READY, keeps serving (it sees this one go), and what this one accepted
/// meanwhile drains. After READY a signal is a plain stop.
async fn cancel_upgrade(
    shutdown: &Shutdown,
    proxy_task: tokio::task::JoinHandle<std::io::Result<()>>,
) -> anyhow::Result<()> {
    tracing::warn!(
        "binary upgrade cancelled: a stop signal came before the takeover completed; the previous process keeps serving"
    );
    shutdown.trigger();
    proxy_task.await.context("proxy task")?.context("proxy")?;
    anyhow::bail!("binary upgrade cancelled by a stop signal; the previous process keeps serving")
}

/// A test's hold between taking the sockets over and telling the old process READY, so a
/// test can send a signal in that window (`crates/weir/tests/upgrade.rs`): the
/// milliseconds in `WEIR_TEST_HOLD_BEFORE_READY_MS`, in debug builds only.
async fn hold_before_ready() {
    #[cfg(debug_assertions)]
    if let Some(millis) = std::env::var("WEIR_TEST_HOLD_BEFORE_READY_MS")
        .ok()
        .and_then(|value| value.parse().ok())
    {
        tokio::time::sleep(std::time::Duration::from_millis(millis)).await;
    }
}

/// Completes on SIGTERM, SIGINT or SIGQUIT (nginx's graceful stop; all three drain). The
/// handlers are registered when this is called, not when the future is first polled: call
/// it before announcing anything, so a signal sent right after start-up drains instead of
/// killing the process.
pub fn wait_for_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    let terminate = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    let quit = signal(SignalKind::quit());
    async move {
        match (terminate, interrupt, quit) {
            (Ok(mut terminate), Ok(mut interrupt), Ok(mut quit)) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = interrupt.recv() => {}
                    _ = quit.recv() => {}
                }
            }
            (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
                tracing::error!(%error, "cannot listen for SIGTERM, SIGINT and SIGQUIT");
                std::future::pending::<()>().await;
            }
        }
    }
}
