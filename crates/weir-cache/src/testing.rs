//! Owned requests and responses that implement the views, for tests and
//! benchmarks here and in the crates that call the cache.

use crate::view::{RequestView, ResponseView, Scheme};

/// A request: method, scheme, authority, path and query, headers.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    pub scheme: Scheme,
    pub authority: Option<String>,
    pub path: String,
    pub headers: Vec<(String, String)>,
}

/// A response head: status and headers.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Req {
    /// `GET path` to `http://example.com`.
    pub fn get(path: &str) -> Req {
        Req::new("GET", path)
    }

    pub fn new(method: &str, path: &str) -> Req {
        Req {
            method: method.to_owned(),
            scheme: Scheme::Http,
            authority: Some("example.com".to_owned()),
            path: path.to_owned(),
            headers: Vec::new(),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn authority(mut self, authority: &str) -> Req {
        self.authority = Some(authority.to_owned());
        self
    }

    pub fn no_authority(mut self) -> Req {
        self.authority = None;
        self
    }

    pub fn https(mut self) -> Req {
        self.scheme = Scheme::Https;
        self
    }
}

impl Resp {
    pub fn new(status: u16) -> Resp {
        Resp {
            status,
            headers: Vec::new(),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Resp {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

impl RequestView for Req {
    fn method(&self) -> &[u8] {
        self.method.as_bytes()
    }

    fn scheme(&self) -> Scheme {
        self.scheme
    }

    fn authority(&self) -> Option<&[u8]> {
        self.authority.as_deref().map(str::as_bytes)
    }

    fn path_and_query(&self) -> &[u8] {
        self.path.as_bytes()
    }

    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
    }
}

impl ResponseView for Resp {
    fn status(&self) -> u16 {
        self.status
    }

    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
    }
}
