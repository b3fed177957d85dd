//! Each codec's speed per core at its default level and the size reduction,
//! on a text corpus given as files (`bench/codecs` builds one from the
//! repository's Rust sources and Markdown).
//!
//! Usage: `codecs [--seconds N] FILE...`. Each file is compressed as one
//! response body (then the whole corpus as one body, to show the encoders
//! without their per-response set-up), in 16 KiB chunks as the pipeline would push them, through
//! weir's `Compressor`; rounds repeat until N seconds of CPU time (default 2)
//! have been spent. Speed is input bytes per CPU second of this process,
//! read from /proc/self/stat, so other load on the machine does not count.

use std::time::Instant;

use weir_cache::compress::{Coding, Compressor, Levels};

const CHUNK: usize = 16 * 1024;

fn main() {
    let mut seconds = 2.0;
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--seconds" {
            seconds = args
                .next()
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| fail("--seconds takes a number"));
        } else {
            files.push(arg);
        }
    }
    if files.is_empty() {
        fail("usage: codecs [--seconds N] FILE...");
    }
    let corpus: Vec<Vec<u8>> = files
        .iter()
        .map(|path| std::fs::read(path).unwrap_or_else(|error| fail(&format!("{path}: {error}"))))
        .collect();
    let total: usize = corpus.iter().map(Vec::len).sum();
    let levels = Levels::default();
    println!(
        "corpus: {} files, {:.2} MB (largest {:.1} KB); chunks of {} KiB; CPU time from /proc/self/stat",
        corpus.len(),
        total as f64 / 1e6,
        corpus.iter().map(Vec::len).max().unwrap_or(0) as f64 / 1e3,
        CHUNK / 1024
    );
    let whole = vec![corpus.concat()];
    for (label, bodies) in [
        ("one response per file", &corpus),
        ("the corpus as one stream", &whole),
    ] {
        println!("\n{label}:");
        println!(
            "{:<8} {:>5} {:>12} {:>10} {:>14} {:>14}",
            "codec", "level", "out MB", "reduction", "MB/s per core", "MB/s wall"
        );
        for coding in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            let level = match coding {
                Coding::Gzip => levels.gzip as i32,
                Coding::Brotli => levels.brotli as i32,
                Coding::Zstd => levels.zstd,
                Coding::Identity => 0,
            };
            let (out, rounds, cpu, wall) = measure(coding, levels, bodies, seconds);
            let input = (total * rounds) as f64;
            println!(
                "{:<8} {:>5} {:>12.3} {:>9.1}% {:>14.1} {:>14.1}",
                coding.token(),
                level,
                out as f64 / 1e6,
                100.0 * (1.0 - out as f64 / total as f64),
                input / 1e6 / cpu,
                input / 1e6 / wall
            );
        }
    }
}

/// Compresses the corpus until `seconds` of CPU time: (output bytes of one
/// round, rounds, CPU seconds, wall seconds).
fn measure(
    coding: Coding,
    levels: Levels,
    corpus: &[Vec<u8>],
    seconds: f64,
) -> (usize, usize, f64, f64) {
    let cpu_start = cpu_seconds();
    let wall_start = Instant::now();
    let mut rounds = 0;
    loop {
        let mut round_out = 0;
        for file in corpus {
            let mut compressor = Compressor::new(coding, levels, Some(file.len() as u64), None)
                .unwrap_or_else(|error| fail(&format!("{coding:?}: {error}")))
                .unwrap_or_else(|| fail("identity has no encoder"));
            for chunk in file.chunks(CHUNK) {
                round_out += compressor.push(chunk).map(|bytes| bytes.len()).unwrap_or(0);
            }
            round_out += compressor.finish().map(|bytes| bytes.len()).unwrap_or(0);
        }
        rounds += 1;
        if cpu_seconds() - cpu_start >= seconds {
            return (
                round_out,
                rounds,
                cpu_seconds() - cpu_start,
                wall_start.elapsed().as_secs_f64(),
            );
        }
    }
}
/// User + system CPU time of this process, from /proc/self/stat (in clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .unwrap_or_else(|error| fail(&format!("/proc/self/stat: {error}")));
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn fail(message: &str) -> ! {
    eprintln!("codecs: {message}");
    std::process::exit(2);
}
