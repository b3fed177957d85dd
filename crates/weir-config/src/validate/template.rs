//! Templates: text with `${variable}` references, parsed once at load so that an
//! unknown variable or a capture group the regex does not have is a
//! configuration error, not a surprise at run time.

use regex::bytes::Regex;

use crate::model::{Piece, Template, Variable};

/// The variables every template may use, for error messages.
pub(crate) const VARIABLES: &[&str] = &[
    "host",
    "path",
    "query",
    "uri",
    "method",
    "scheme",
    "client_address",
    "request_id",
    "tls_version",
    "sni",
    "client_subject",
    "header.NAME",
    "cookie.NAME",
    "query.NAME",
];

/// Parses `text`. `captures` is the regex whose groups `${1}` and `${name}`
/// refer to, if the template's rule has one. `$$` is a literal `$`; a `$`
/// not followed by `{` is literal too.
pub(crate) fn parse(text: &str, captures: Option<&Regex>) -> Result<Template, String> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        literal.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(after_escape) = after.strip_prefix('$') {
            literal.push('$');
            rest = after_escape;
            continue;
        }
        let Some(body) = after.strip_prefix('{') else {
            literal.push('$');
            rest = after;
            continue;
        };
        let Some(close) = body.find('}') else {
            return Err(format!(
                "unclosed \"${{\" in \"{text}\" (write $$ for a literal $)"
            ));
        };
        let variable = variable(body[..close].trim(), captures)?;
        if !literal.is_empty() {
            pieces.push(Piece::Literal(std::mem::take(&mut literal)));
        }
        pieces.push(Piece::Variable(variable));
        rest = &body[close + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    Ok(Template { pieces })
}

fn variable(name: &str, captures: Option<&Regex>) -> Result<Variable, String> {
    let simple = match name {
        "host" => Some(Variable::Host),
        "path" => Some(Variable::Path),
        "query" => Some(Variable::Query),
        "uri" => Some(Variable::Uri),
        "method" => Some(Variable::Method),
        "scheme" => Some(Variable::Scheme),
        "client_address" => Some(Variable::ClientAddress),
        "request_id" => Some(Variable::RequestId),
        "tls_version" => Some(Variable::TlsVersion),
        "sni" => Some(Variable::Sni),
        "client_subject" => Some(Variable::ClientSubject),
        _ => None,
    };
    if let Some(variable) = simple {
        return Ok(variable);
    }
    if let Some((kind, field)) = name.split_once('.') {
        if field.is_empty() {
            return Err(format!("\"${{{name}}}\" needs a name after the dot"));
        }
        return match kind {
            "header" if super::values::is_token(field) => {
                Ok(Variable::Header(field.to_ascii_lowercase()))
            }
            "header" => Err(format!("\"{field}\" is not a valid header name")),
            "cookie" => Ok(Variable::Cookie(field.to_owned())),
            "query" => Ok(Variable::QueryParam(field.to_owned())),
            _ => Err(unknown(name, captures)),
        };
    }
    capture(name, captures)
}

fn capture(name: &str, captures: Option<&Regex>) -> Result<Variable, String> {
    let is_number = !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit());
    let Some(regex) = captures else {
        return Err(if is_number {
            format!(
                "\"${{{name}}}\" refers to a capture group, but there is no regex here to \
                 capture from (add path_regex to the rule's match)"
            )
        } else {
            unknown(name, None)
        });
    };
    if is_number {
        let index: usize = name.parse().unwrap_or(usize::MAX);
        let groups = regex.captures_len() - 1;
        if index > groups {
            return Err(format!(
                "\"${{{name}}}\": the regex \"{}\" has {groups} capture group{}",
                regex.as_str(),
                if groups == 1 { "" } else { "s" }
            ));
        }
        return Ok(Variable::Capture(index));
    }
    match regex.capture_names().position(|group| group == Some(name)) {
        Some(index) => Ok(Variable::Capture(index)),
        None => Err(unknown(name, Some(regex))),
    }
}

fn unknown(name: &str, captures: Option<&Regex>) -> String {
    let mut message = format!(
        "unknown variable \"${{{name}}}\"; variables: {}",
        VARIABLES.join(", ")
    );
    match captures {
        Some(regex) => message.push_str(&format!(
            ", and the capture groups of \"{}\" by number or name",
            regex.as_str()
        )),
        None => message.push_str(", and ${1}... with a path_regex"),
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_variables_and_escapes() {
        let template = parse("https://${host}${uri}", None).unwrap();
        assert_eq!(
            template.pieces,
            vec![
                Piece::Literal("https://".into()),
                Piece::Variable(Variable::Host),
                Piece::Variable(Variable::Uri),
            ]
        );
        assert_eq!(parse("a$$b$c", None).unwrap(), Template::literal("a$b$c"));
        assert_eq!(parse("", None).unwrap().as_literal(), Some(""));
        assert_eq!(
            parse("${header.X-Forwarded-Host}", None).unwrap().pieces,
            vec![Piece::Variable(Variable::Header("x-forwarded-host".into()))]
        );
    }

    #[test]
    fn captures_by_number_and_name() {
        let regex = Regex::new("^/u/(?P<id>[0-9]+)/(.*)$").unwrap();
        let template = parse("/users/${id}/${2}", Some(&regex)).unwrap();
        assert_eq!(
            template.pieces,
            vec![
                Piece::Literal("/users/".into()),
                Piece::Variable(Variable::Capture(1)),
                Piece::Literal("/".into()),
                Piece::Variable(Variable::Capture(2)),
            ]
        );
        let error = parse("${3}", Some(&regex)).unwrap_err();
        assert!(error.contains("has 2 capture groups"), "{error}");
        assert!(parse("${1}", None).unwrap_err().contains("no regex"));
    }

    #[test]
    fn unknown_and_unclosed() {
        assert!(
            parse("${hots}", None)
                .unwrap_err()
                .contains("unknown variable \"${hots}\"")
        );
        assert!(parse("${host", None).unwrap_err().contains("unclosed"));
        assert!(parse("${header.}", None).is_err());
        assert!(parse("${header.a b}", None).is_err());
        assert!(
            parse("${foo.bar}", None)
                .unwrap_err()
                .contains("unknown variable")
        );
    }
}
