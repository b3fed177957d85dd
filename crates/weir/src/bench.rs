//! `weir bench`: turns the command line into a `weir_bench::Plan`, runs it and prints the
//! report (text, or JSON with `--json`).

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::{Context, bail};
use weir_bench::crypto::{self, CryptoSettings};
use weir_bench::suite::{self, SuiteSettings, SuiteTarget};
use weir_bench::{
    ConnectionMode, L4Mode, Plan, Settings, Stop, TlsSettings, TlsVersions, UrlOrder, selftest,
};

use crate::cli::{BenchArgs, BenchCommand, CryptoArgs, L4ModeArg, OnOff, SuiteArgs, TlsVersionArg};

/// Without `-d` or `-n`, a run lasts this long.
const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// `weir bench crypto --quick`: time per item.
const CRYPTO_QUICK: Duration = Duration::from_millis(20);

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(BenchCommand::Selftest) = args.command {
        let outcome =
            selftest::run(selftest::SelftestOptions::default()).context("bench selftest")?;
        print!("{}", outcome.text());
        if !outcome.passed() {
            bail!("selftest failed: corrected percentiles are off the analytic distribution");
        }
        return Ok(());
    }
    if let Some(BenchCommand::Suite(suite)) = args.command {
        return run_suite(*suite);
    }
    if let Some(BenchCommand::Crypto(crypto)) = args.command {
        return run_crypto(&crypto);
    }
    let mut urls = args.urls;
    if let Some(file) = &args.url_file {
        urls.extend(weir_bench::read_url_file(file)?);
    }
    let body = match (&args.body, &args.body_file) {
        (Some(text), _) => text.clone().into_bytes(),
        (None, Some(file)) => {
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?
        }
        (None, None) => Vec::new(),
    };
    let stop = match (args.requests, args.duration) {
        (Some(count), _) => Stop::Count(count),
        (None, duration) => Stop::Duration(duration.unwrap_or(DEFAULT_DURATION)),
    };
    let plan = Plan::new(Settings {
        urls,
        method: args.method,
        headers: args.headers,
        body,
        order: if args.random {
            UrlOrder::Random
        } else {
            UrlOrder::Sequential
        },
        connections: args.connections,
        threads: args.threads,
        stop,
        rate: args.rate,
        mode: if args.close {
            ConnectionMode::Close
        } else {
            ConnectionMode::KeepAlive
        },
        timeout: args.timeout,
        progress: !args.no_progress && std::io::stderr().is_terminal(),
        l4_mode: match args.l4_mode {
            L4ModeArg::Connect => L4Mode::Connect,
            L4ModeArg::Rr => L4Mode::RequestResponse,
        },
        l4_size: args.l4_size,
        tls: TlsSettings {
            resumption: args.tls_resumption == OnOff::On,
            versions: match args.tls_version {
                None => TlsVersions::Both,
                Some(TlsVersionArg::Tls12) => TlsVersions::Tls12,
                Some(TlsVersionArg::Tls13) => TlsVersions::Tls13,
            },
            cacert: args.cacert,
            sni: args.sni,
        },
        http2_streams: args.h2.then_some(args.streams),
    })?;
    let report = weir_bench::run(&plan).context("bench run")?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", weir_bench::render::text(&report));
    }
    // After the report, so what was measured is still shown; the exit status says it failed.
    report.check_tls()?;
    if report.requests.successful == 0 {
        bail!(
            "no request succeeded ({} answered with status >= 400, {} failed): nothing was measured",
            report.requests.non_2xx,
            report.errors.total
        );
    }
    Ok(())
}

/// `weir bench crypto`.
fn run_crypto(args: &CryptoArgs) -> anyhow::Result<()> {
    let report = crypto::run(&CryptoSettings {
        duration: if args.quick {
            CRYPTO_QUICK
        } else {
            args.duration
        },
    })
    .context("bench crypto")?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", crypto::text(&report));
    }
    Ok(())
}

/// `weir bench suite`.
fn run_suite(args: SuiteArgs) -> anyhow::Result<()> {
    let mut targets = vec![SuiteTarget {
        base: args.target,
        l4: args.l4.clone(),
        tls: args.tls,
        http2: args.h2,
        h2c: args.h2c,
        cache: args.cache,
    }];
    if let Some(base) = args.compare {
        targets.push(SuiteTarget {
            base,
            l4: args.compare_l4.or(args.l4),
            tls: args.compare_tls,
            http2: args.compare_h2,
            h2c: args.compare_h2c,
            cache: args.compare_cache,
        });
    }
    let report = suite::run(&SuiteSettings {
        targets,
        row_duration: if args.quick {
            Duration::from_secs(1)
        } else {
            args.row_duration
        },
        slices: args.slices,
        connections: args.connections,
        threads: args.threads,
        timeout: args.timeout,
    })
    .context("bench suite")?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", suite::text(&report));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{BenchCommand, Cli, Command};

    fn bench(args: &[&str]) -> Result<crate::cli::BenchArgs, clap::Error> {
        let cli = Cli::try_parse_from(["weir", "bench"].iter().chain(args))?;
        match cli.command {
            Command::Bench(args) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "a table of command lines and what they parse to"
    )]
    fn arguments() {
        let args = bench(&["selftest"]).expect("selftest parses");
        assert!(matches!(args.command, Some(BenchCommand::Selftest)));
        let args = bench(&[
            "suite",
            "http://127.0.0.1:1",
            "--compare",
            "http://127.0.0.1:2",
            "--l4",
            "127.0.0.1:3",
            "--quick",
            "--slices",
            "3",
            "--json",
        ])
        .expect("a suite parses");
        let Some(BenchCommand::Suite(suite)) = args.command else {
            panic!("parsed as {:?}", args.command);
        };
        assert_eq!(suite.compare.as_deref(), Some("http://127.0.0.1:2"));
        assert_eq!(suite.l4.as_deref(), Some("127.0.0.1:3"));
        assert!(suite.quick && suite.json);
        assert_eq!(suite.slices, 3);
        assert_eq!(suite.row_duration, std::time::Duration::from_secs(5));
        assert!(bench(&["suite"]).is_err(), "a suite needs a target");
        let args = bench(&[
            "-c",
            "8",
            "-n",
            "100",
            "--rate",
            "50",
            "--close",
            "-H",
            "A: b",
            "-H",
            "C: d",
            "http://127.0.0.1:1/",
            "http://127.0.0.1:2/",
        ])
        .expect("a run parses");
        assert_eq!(args.urls.len(), 2);
        assert_eq!(
            (args.connections, args.requests, args.rate),
            (8, Some(100), Some(50.0))
        );
        assert!(args.close);
        assert_eq!(args.headers, ["A: b", "C: d"]);
        assert_eq!(args.timeout, std::time::Duration::from_secs(5));
        let args = bench(&["-d", "250ms", "-f", "urls.txt"]).expect("a URL file alone is enough");
        assert_eq!(args.duration, Some(std::time::Duration::from_millis(250)));
        assert!(bench(&[]).is_err(), "no URL");
        let args = bench(&[
            "--l4-mode",
            "connect",
            "--l4-size",
            "128",
            "tcp://127.0.0.1:9",
        ])
        .expect("an L4 run parses");
        assert_eq!(args.l4_mode, crate::cli::L4ModeArg::Connect);
        assert_eq!(args.l4_size, Some(128));
        assert_eq!(
            bench(&["tcp://127.0.0.1:9"]).expect("parses").l4_mode,
            crate::cli::L4ModeArg::Rr
        );
        assert!(bench(&["--l4-mode", "udp", "tcp://a:1"]).is_err());
        let args = bench(&[
            "--tls-resumption",
            "off",
            "--tls-version",
            "1.3",
            "--cacert",
            "ca.pem",
            "--sni",
            "origin.test",
            "--close",
            "https://127.0.0.1:8443/",
        ])
        .expect("an HTTPS run parses");
        assert_eq!(args.tls_resumption, crate::cli::OnOff::Off);
        assert_eq!(args.tls_version, Some(crate::cli::TlsVersionArg::Tls13));
        assert_eq!(args.sni.as_deref(), Some("origin.test"));
        let args = bench(&["https://a/"]).expect("defaults");
        assert_eq!(args.tls_resumption, crate::cli::OnOff::On);
        assert_eq!(args.tls_version, None);
        assert!(bench(&["--tls-version", "1.1", "https://a/"]).is_err());
        let args = bench(&["crypto", "--quick", "--json"]).expect("crypto parses");
        let Some(BenchCommand::Crypto(crypto)) = args.command else {
            panic!("parsed as {:?}", args.command);
        };
        assert!(crypto.quick && crypto.json);
        assert_eq!(crypto.duration, std::time::Duration::from_secs(1));
        let args = bench(&[
            "suite",
            "http://127.0.0.1:1",
            "--tls",
            "https://127.0.0.1:2",
        ])
        .expect("a suite with TLS parses");
        let Some(BenchCommand::Suite(suite)) = args.command else {
            panic!("parsed as {:?}", args.command);
        };
        assert_eq!(suite.tls.as_deref(), Some("https://127.0.0.1:2"));
        assert!(
            bench(&["-d", "1s", "-n", "5", "http://a/"]).is_err(),
            "-d conflicts with -n"
        );
        // HTTP/2: --streams needs --h2; -m stays --method.
        let args = bench(&["--h2", "--streams", "10", "-m", "POST", "https://a/"]).expect("h2");
        assert!(args.h2);
        assert_eq!((args.streams, args.method.as_str()), (10, "POST"));
        assert_eq!(bench(&["--h2", "http://a/"]).expect("h2c").streams, 1);
        assert!(
            bench(&["--streams", "4", "http://a/"]).is_err(),
            "--streams needs --h2"
        );
        let args = bench(&["suite", "http://127.0.0.1:1", "--h2"]).expect("suite --h2");
        let Some(BenchCommand::Suite(suite)) = args.command else {
            panic!("parsed as {:?}", args.command);
        };
        assert!(suite.h2 && !suite.compare_h2);
    }
}
