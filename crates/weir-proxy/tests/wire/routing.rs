//! The route stage: host and path-prefix rules pick the pool, in order;
//! the default pool takes the rest. Hosts and paths are matched as traffic rules match
//! them (docs/design/rules.md).

use weir_testkit::client::Connection;
use weir_testkit::{TestOrigin, TestProxy, config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_host_and_path_prefix() {
    let default = TestOrigin::start("default").await;
    let hosts = TestOrigin::start("hosts").await;
    let paths = TestOrigin::start("paths").await;
    let proxy = TestProxy::start(&config(
        &[default.addr],
        &format!(
            "[pools.hosts]\nnodes = [{{ address = \"{}\" }}]\n\
             [pools.paths]\nnodes = [{{ address = \"{}\" }}]",
            hosts.addr, paths.addr
        ),
        "[[virtual_servers.web.routes]]\nhost = \"*.example.com\"\npool = \"hosts\"\n\
         [[virtual_servers.web.routes]]\npath_prefix = \"/api/\"\npool = \"paths\"",
    ))
    .await;
    let cases: [(&str, &str, &str); 18] = [
        ("GET / HTTP/1.1", "a.example.com", "hosts"),
        ("GET / HTTP/1.1", "A.B.EXAMPLE.COM:8080", "hosts"),
        // A trailing dot names the same host, as it does for rules.
        ("GET / HTTP/1.1", "a.example.com.", "hosts"),
        ("GET / HTTP/1.1", "a.example.com.:80", "hosts"),
        // The path as rules match it: escapes of unreserved characters decoded, dot
        // segments resolved, `//` merged. `/x/../api/` is `/api/`'s, and `/api/../x` is not.
        ("GET /%61pi/x HTTP/1.1", "other", "paths"),
        ("GET //api/x HTTP/1.1", "other", "paths"),
        ("GET /./api/x HTTP/1.1", "other", "paths"),
        ("GET /x/../api/x HTTP/1.1", "other", "paths"),
        ("GET /api/../x HTTP/1.1", "other", "default"),
        ("GET /api/%2e%2e/x HTTP/1.1", "other", "default"),
        ("GET /api/x HTTP/1.1", "w.example.com", "hosts"),
        ("GET / HTTP/1.1", "example.com", "default"),
        ("GET / HTTP/1.1", "aexample.com", "default"),
        ("GET /api/x HTTP/1.1", "other", "paths"),
        ("GET /api/ HTTP/1.0", "", "paths"),
        ("GET /apix HTTP/1.1", "other", "default"),
        ("GET /API/x HTTP/1.1", "other", "default"),
        (
            "GET http://z.example.com/api/ HTTP/1.1",
            "z.example.com",
            "hosts",
        ),
    ];
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    for (line, host, pool) in cases {
        let host_line = if host.is_empty() {
            String::new()
        } else {
            format!("Host: {host}\r\n")
        };
        connection
            .send(format!("{line}\r\n{host_line}Connection: keep-alive\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let response = connection.response().await.unwrap();
        assert_eq!(
            response.header("x-origin"),
            Some(pool),
            "{line} with Host {host:?}"
        );
    }
    assert_eq!(default.stats.requests(), 6);
    assert_eq!(hosts.stats.requests(), 6);
    assert_eq!(paths.stats.requests(), 6);
    proxy.stop().await;
    for origin in [default, hosts, paths] {
        origin.stop().await;
    }
}
