use super::*;
use crate::table::tests::lab_report;

#[test]
fn escapes_markup() {
    assert_eq!(
        escape("<b>\"a\" & 'b'</b>"),
        "&lt;b&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/b&gt;"
    );
}

#[test]
fn the_page_embeds_its_data_and_a_chart_per_figure() {
    let mut report = lab_report();
    report.notes.push("a </script> in a note".into());
    let page = render(&report);
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(page.matches("<svg class=\"chart\"").count(), 9);
    for chart in [
        "connections",
        "rate",
        "latency",
        "errors",
        "cpu",
        "memory",
        "tls-cpu",
        "tls-memory",
        "suite",
    ] {
        assert!(page.contains(&format!("data-chart=\"{chart}\"")), "{chart}");
    }
    // The data block is the report, exactly, and cannot end its script element early.
    let start = page.find("id=\"lab-data\">").expect("data block") + "id=\"lab-data\">".len();
    let end = start + page[start..].find("</script>").expect("end of data");
    let data: LabReport = serde_json::from_str(&page[start..end]).expect("JSON");
    assert_eq!(data, report);
    assert!(page.contains("<li>a &lt;/script&gt; in a note</li>"));
    assert!(
        page.contains("data-charts-drawn=\"0\""),
        "the script sets it"
    );
}

#[test]
fn the_page_is_self_contained() {
    let page = render(&lab_report());
    for outside in ["src=", "href=", "<link", "@import", "url(", "<iframe"] {
        assert!(
            !page.contains(outside),
            "the page refers outside: {outside}"
        );
    }
}

#[test]
fn sections_follow_the_experiments_that_ran() {
    let mut report = lab_report();
    report.tls = None;
    report.suite = None;
    let page = render(&report);
    assert_eq!(page.matches("<svg class=\"chart\"").count(), 6);
    assert!(!page.contains("id=\"tls\""));
}

#[test]
fn drawn_pages_are_told_from_undrawn_ones() {
    let chart = "<svg class=\"chart\" data-chart=\"rate\" data-drawn=\"true\"><path class=\"series\" data-points=\"12\"></path></svg>";
    let drawn = format!("<body data-charts-drawn=\"2\">{chart}{chart}</body>");
    assert_eq!(check_drawn(&drawn), Ok(2));
    // The page as served, before any script ran.
    assert!(check_drawn(&render(&lab_report())).is_err());
    let half = format!("<body data-charts-drawn=\"1\">{chart}{chart}</body>");
    assert_eq!(check_drawn(&half), Err("1 of 2 charts drawn".to_owned()));
    let empty = drawn.replace("data-points=\"12\"", "data-points=\"0\"");
    assert!(check_drawn(&empty).is_err());
    assert!(check_drawn("<body></body>").is_err());
}
