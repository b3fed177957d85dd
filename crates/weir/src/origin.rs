//! `weir origin`: the built-in origin server on its own.

use anyhow::Context;
use weir_core::Shutdown;
use weir_origin::{Origin, OriginMode, OriginOptions, OriginTls};

use crate::cli::OriginArgs;
use crate::serve::{runtime, wait_for_signal};

pub fn run(args: OriginArgs) -> anyhow::Result<()> {
    crate::logging::init(&weir_config::Log {
        access_log: false,
        level: "info".into(),
        format: weir_config::LogFormat::Text,
    });
    // Certificate problems are reported before any port is bound.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(certificate), Some(key)) => Some(
            OriginTls::from_pem_files(certificate, key, !args.tls_no_resumption)
                .context("--tls-cert/--tls-key")?,
        ),
        _ => None,
    };
    let https = tls.is_some();
    let runtime = runtime(args.threads)?;
    runtime.block_on(async move {
        let options = OriginOptions {
            max_connections: args.max_connections,
            keep_alive: !args.no_keep_alive,
            per_connection_memory: args.per_connection_memory,
            mode: if args.echo {
                OriginMode::Echo
            } else {
                OriginMode::Http
            },
            tls,
            ..OriginOptions::new(args.name, args.listen)
        };
        let origin = Origin::bind(options)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        // The signals are handled before the origin says it serves.
        let stop = wait_for_signal();
        crate::serve::ignore_operator_signals("weir origin")?;
        tracing::info!(listen = %origin.local_addr(), echo = args.echo, https, "origin serving");
        let (shutdown, signal) = Shutdown::new();
        let server = tokio::spawn(origin.run(signal));
        stop.await;
        shutdown.trigger();
        server.await.context("origin task")??;
        Ok(())
    })
}
