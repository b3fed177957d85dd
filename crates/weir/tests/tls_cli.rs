//! The binary and TLS: certificate problems are configuration errors found
//! before anything binds, `weir cert` makes usable files, and SIGHUP swaps
//! certificates in a running `weir serve`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use weir_testkit::free_ports;
use weir_testkit::tls::{self, ClientOptions, Pki};
use weir_tls::KeyType;

mod process;
use process::{Running, signal};

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

fn https_config(port: u16, origin_port: u16, cert: &Path, key: &Path) -> String {
    format!(
        "[log]\nlevel = \"warn\"\naccess_log = false\n\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"https\"\npool = \"web\"\n\n\
         [virtual_servers.web.tls]\n\
         certificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:{origin_port}\" }}]\n\n\
         [[origins]]\nname = \"o\"\nlisten = \"127.0.0.1:{origin_port}\"\n",
        cert.display(),
        key.display()
    )
}

#[test]
fn check_and_serve_report_an_unusable_certificate_with_line_and_key_before_binding() {
    let pki = Pki::new();
    let [port, origin_port] = free_ports();
    let missing = pki.path("missing.pem");
    let config_path = pki.path("weir.toml");
    std::fs::write(
        &config_path,
        https_config(port, origin_port, &missing, &pki.path("missing.key")),
    )
    .unwrap();
    let output = weir().arg("check").arg(&config_path).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(":11: virtual_servers.web.tls.certificates[0].cert: cannot read"),
        "{stderr}"
    );

    // A key that does not belong to the certificate.
    let a = pki.server("a", &["a.test"], KeyType::EcdsaP256);
    let b = pki.server("b", &["b.test"], KeyType::EcdsaP256);
    std::fs::write(&config_path, https_config(port, origin_port, &a.0, &b.1)).unwrap();
    let output = weir()
        .args(["serve", "--config"])
        .arg(&config_path)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("certificates[0].key") && stderr.contains("does not belong"),
        "{stderr}"
    );
    // Nothing was bound.
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("port still free");
}

/// Names and lifetimes a certificate cannot have are refused before anything is written.
#[test]
fn weir_cert_refuses_bad_names_and_lifetimes_and_writes_nothing() {
    let pki = Pki::new();
    for bad in [
        &["--name", ""][..],
        &["--name", "bad name!"],
        &["--days", "0"],
        &["--days", "3651"],
    ] {
        let out = pki.path("refused");
        let output = weir()
            .arg("cert")
            .args(bad)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{bad:?}");
        assert!(
            stderr.contains(bad[0]) && !stderr.contains("panicked"),
            "{stderr}"
        );
        assert!(!out.exists(), "{bad:?}: {out:?} was written");
    }
    let out = pki.path("wildcard");
    let output = weir()
        .args(["cert", "--name", "*.example.test", "--name", "::1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn weir_cert_writes_a_ca_and_certificates_that_a_config_accepts() {
    let pki = Pki::new();
    let out = pki.path("certs");
    let output = weir()
        .args(["cert", "--client", "alice", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("certificates = ["));
    for file in [
        "ca.pem",
        "ca.key",
        "server-ecdsa.pem",
        "server-ecdsa.key",
        "server-rsa.pem",
        "server-rsa.key",
        "client.pem",
        "client.key",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    // Refuses to overwrite without --force.
    let again = weir().arg("cert").arg("--out").arg(&out).output().unwrap();
    assert!(!again.status.success());
    let config_path = pki.path("weir.toml");
    let [port, origin_port] = free_ports();
    std::fs::write(
        &config_path,
        https_config(
            port,
            origin_port,
            &out.join("server-rsa.pem"),
            &out.join("server-rsa.key"),
        ),
    )
    .unwrap();
    let output = weir().arg("check").arg(&config_path).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_swaps_certificates_and_a_broken_one_keeps_the_old() {
    let pki = Pki::new();
    let first = pki.server("first", &["site.test"], KeyType::EcdsaP256);
    let second = pki.server("second", &["site.test"], KeyType::EcdsaP256);
    let (cert, key) = (pki.path("live.pem"), pki.path("live.key"));
    std::fs::copy(&first.0, &cert).unwrap();
    std::fs::copy(&first.1, &key).unwrap();
    let [port, origin_port] = free_ports();
    let config_path = pki.path("weir.toml");
    std::fs::write(&config_path, https_config(port, origin_port, &cert, &key)).unwrap();
    let child = Running(
        weir()
            .args(["serve", "--config"])
            .arg(&config_path)
            .spawn()
            .unwrap(),
    );
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let client = tls::client_config(&ClientOptions {
        resumption: false,
        ..ClientOptions::default()
    });
    let mut connected = None;
    for _ in 0..100 {
        if let Ok(stream) = tls::connect(addr, "site.test", &client).await {
            connected = Some(stream);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut open = connected.expect("weir serves TLS within 5 s");
    assert_eq!(tls::peer_leaf(&open), tls::leaf(&first.0));
    assert_eq!(tls::get(&mut open, "/").await.unwrap().status, 200);

    std::fs::copy(&second.0, &cert).unwrap();
    std::fs::copy(&second.1, &key).unwrap();
    signal(&child.0, "HUP");
    let mut swapped = false;
    for _ in 0..100 {
        let stream = tls::connect(addr, "site.test", &client).await.unwrap();
        if tls::peer_leaf(&stream) == tls::leaf(&second.0) {
            swapped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(swapped, "SIGHUP did not swap the certificate within 5 s");
    // The connection from before the reload is untouched.
    assert_eq!(tls::get(&mut open, "/").await.unwrap().status, 200);

    // A broken certificate: the reload is refused, the second one keeps serving.
    std::fs::write(
        &cert,
        "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    signal(&child.0, "HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut after = tls::connect(addr, "site.test", &client).await.unwrap();
    assert_eq!(tls::peer_leaf(&after), tls::leaf(&second.0));
    assert_eq!(tls::get(&mut after, "/").await.unwrap().status, 200);
}
