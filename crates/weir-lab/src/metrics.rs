//! Reading weir's Prometheus `/metrics` page: the sum of a metric's series, optionally only
//! those with one label value. Plain functions over the page's text.

/// The sum over every series of `name` (the exact name, with or without labels) whose labels
/// include `label` when given; `None` when no series matched.
pub fn sum(page: &str, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    let wanted_label = label.map(|(key, value)| format!("{key}=\"{value}\""));
    let mut total = None;
    for line in page.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.chars().next() {
            Some('{') => match rest.split_once('}') {
                Some((labels, value)) => (labels, value),
                None => continue,
            },
            Some(' ') => ("", rest),
            _ => continue,
        };
        if let Some(wanted) = &wanted_label
            && !labels.contains(wanted.as_str())
        {
            continue;
        }
        if let Some(value) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *total.get_or_insert(0.0) += value;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# HELP weir_client_connections_open Client connections currently open\n\
        # TYPE weir_client_connections_open gauge\n\
        weir_client_connections_open{virtual_server=\"a\"} 10\n\
        weir_client_connections_open{virtual_server=\"b\"} 5\n\
        weir_client_connections_open_other 99\n\
        weir_requests_total{virtual_server=\"a\",class=\"2xx\"} 100\n\
        weir_requests_total{virtual_server=\"a\",class=\"5xx\"} 3\n\
        weir_requests_total{virtual_server=\"b\",class=\"5xx\"} 4\n\
        weir_reuse_ratio 12.5\n";

    #[test]
    fn sums_series_by_exact_name_and_label() {
        assert_eq!(sum(PAGE, "weir_client_connections_open", None), Some(15.0));
        assert_eq!(
            sum(PAGE, "weir_requests_total", Some(("class", "5xx"))),
            Some(7.0)
        );
        assert_eq!(sum(PAGE, "weir_reuse_ratio", None), Some(12.5));
        assert_eq!(sum(PAGE, "weir_missing", None), None);
        assert_eq!(
            sum(PAGE, "weir_requests_total", Some(("class", "4xx"))),
            None
        );
    }
}
