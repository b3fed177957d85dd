//! The HTML report: one self-contained page (inline CSS, inline JavaScript, the results as
//! inline JSON; nothing fetched) with the text tables and charts in the spirit of the source
//! document's figures — client vs origin connections over time, request rate, connect
//! latency, memory, the TLS experiment's CPU and memory, the Zeus table relative to direct.
//! The charts are drawn by `report.js` from the embedded JSON, which then marks the body
//! with `data-charts-drawn`.

use std::fmt::Write;

use crate::model::LabReport;
use crate::table;

const SCRIPT: &str = include_str!("report.js");

const STYLE: &str = "
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
pre { background: #f6f8fa; padding: 1em; overflow-x: auto; font-size: 13px; }
figure { margin: 1.5em 0; }
figcaption { font-weight: 600; margin-bottom: 0.4em; }
svg.chart { background: #fff; border: 1px solid #e4e4e4; max-width: 100%; height: auto; }
svg .grid { stroke: #eee; }
svg .axis { stroke: #555; }
svg text { font-size: 11px; fill: #333; }
svg .series { stroke-width: 2; }
.pass { color: #1a7f37; } .fail { color: #cf222e; }
";

/// Text made safe inside HTML elements and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The report as JSON safe inside a `<script>` element (no `</script>`, no `<!--`).
fn script_json(report: &LabReport) -> String {
    serde_json::to_string(report)
        .unwrap_or_else(|_| "{}".to_owned())
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

fn figure(out: &mut String, chart: &str, caption: &str) {
    let _ = writeln!(
        out,
        "<figure><figcaption>{}</figcaption><svg class=\"chart\" data-chart=\"{chart}\" \
         xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"{}\"></svg></figure>",
        escape(caption),
        escape(caption)
    );
}

fn checks(out: &mut String, checks: &[crate::model::Check]) {
    if checks.is_empty() {
        return;
    }
    out.push_str("<ul class=\"checks\">\n");
    for check in checks {
        let (class, verdict) = if check.passed {
            ("pass", "PASS")
        } else {
            ("fail", "FAIL")
        };
        let _ = writeln!(
            out,
            "<li><span class=\"{class}\">{verdict}</span> {} ({})</li>",
            escape(&check.name),
            escape(&check.detail)
        );
    }
    out.push_str("</ul>\n");
}

/// The whole page.
pub fn render(report: &LabReport) -> String {
    let machine = &report.machine;
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(
        out,
        "<title>weir lab — {}</title>\n<style>{STYLE}</style>\n</head>\n<body data-charts-drawn=\"0\">",
        escape(&report.date)
    );
    let _ = writeln!(
        out,
        "<h1>weir lab</h1>\n<p>weir {} · {} · <code>{}</code><br>{} cores ({}), {:.0} GiB, \
         kernel {}, open-file limit {}, load average {:.2} at the start</p>",
        escape(&report.weir_version),
        escape(&report.date),
        escape(&report.command),
        machine.cores,
        escape(&machine.cpu),
        machine.memory_gib,
        escape(&machine.kernel),
        machine.open_files,
        machine.load_average
    );
    if let Some(offload) = &report.offload {
        out.push_str("<section id=\"offload\">\n<h2>TCP connection offload</h2>\n");
        out.push_str(
            "<p>Many slow keep-alive clients against an origin that refuses connections past \
             its cap: directly, then through weir (Cisco ACE TCP-offload experiment, figures \
             2–7).</p>\n",
        );
        let _ = writeln!(out, "<pre>{}</pre>", escape(&table::offload_table(offload)));
        checks(&mut out, &offload.checks);
        figure(
            &mut out,
            "connections",
            "Client connections held vs connections open on the origin, over time",
        );
        figure(&mut out, "rate", "Requests per second served, over time");
        figure(
            &mut out,
            "latency",
            "Connection setup latency (p99 of each sampling period)",
        );
        figure(
            &mut out,
            "errors",
            "Client errors per second (connections refused, reset or closed)",
        );
        figure(&mut out, "cpu", "Origin CPU, over time");
        figure(
            &mut out,
            "memory",
            "Origin and weir resident memory, over time",
        );
        out.push_str("</section>\n");
    }
    if let Some(tls) = &report.tls {
        out.push_str("<section id=\"tls\">\n<h2>TLS offload</h2>\n");
        out.push_str(
            "<p>The origin serving HTTPS itself vs plain HTTP behind weir terminating TLS, at \
             the same load (Cisco ACE SSL-offload experiment, figures 8–9).</p>\n",
        );
        let _ = writeln!(out, "<pre>{}</pre>", escape(&table::tls_table(tls)));
        checks(&mut out, &tls.checks);
        figure(&mut out, "tls-cpu", "Origin CPU seconds over the load");
        figure(&mut out, "tls-memory", "Peak resident memory");
        out.push_str("</section>\n");
    }
    if let Some(suite) = &report.suite {
        out.push_str("<section id=\"suite\">\n<h2>The Zeus table</h2>\n");
        let _ = writeln!(out, "<pre>{}</pre>", escape(&table::suite_text(suite)));
        figure(
            &mut out,
            "suite",
            "Each row's figure relative to direct (direct = 1)",
        );
        out.push_str("</section>\n");
    }
    if !report.notes.is_empty() {
        out.push_str("<h2>Notes</h2>\n<ul>\n");
        for note in &report.notes {
            let _ = writeln!(out, "<li>{}</li>", escape(note));
        }
        out.push_str("</ul>\n");
    }
    let _ = writeln!(
        out,
        "<script type=\"application/json\" id=\"lab-data\">{}</script>",
        script_json(report)
    );
    let _ = writeln!(out, "<script>{SCRIPT}</script>\n</body>\n</html>");
    out
}

/// Checks a page as a browser left it (its DOM after the script ran, e.g. from
/// `chromium --headless --dump-dom`): every chart was drawn (the body's `data-charts-drawn`
/// equals the number of charts, each chart is marked `data-drawn`) and every line has data
/// points. Returns the number of charts.
pub fn check_drawn(dom: &str) -> Result<usize, String> {
    // The page's own elements come before its scripts (whose text mentions the markers).
    let dom = dom.split("<script").next().unwrap_or(dom);
    let charts = dom.matches("<svg class=\"chart\"").count();
    if charts == 0 {
        return Err("the page has no chart".to_owned());
    }
    let marker = dom
        .split("data-charts-drawn=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|count| count.parse::<usize>().ok())
        .ok_or("no data-charts-drawn marker on the body")?;
    if marker != charts {
        return Err(format!("{marker} of {charts} charts drawn"));
    }
    let drawn = dom.matches("data-drawn=\"true\"").count();
    if drawn != charts {
        return Err(format!("{drawn} of {charts} charts marked drawn"));
    }
    let mut lines = 0;
    for rest in dom.split("data-points=\"").skip(1) {
        let points: usize = rest
            .split('"')
            .next()
            .and_then(|count| count.parse().ok())
            .ok_or("a line without a point count")?;
        if points == 0 {
            return Err("a line with no data point".to_owned());
        }
        lines += 1;
    }
    let bars = dom.matches("class=\"bar\"").count();
    if lines + bars == 0 {
        return Err("charts with neither lines nor bars".to_owned());
    }
    Ok(charts)
}

#[cfg(test)]
mod tests;
