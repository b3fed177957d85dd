//! `weir cert`: a test CA and certificates signed by it, written as PEM.
//!
//! For tests, labs and trying HTTPS out — not for production, where
//! certificates come from a real CA.

use std::path::Path;

use anyhow::{Context, bail};
use weir_tls::{KeyType, TestCa};

use crate::cli::{CertArgs, CertKeyType};

pub fn run(args: &CertArgs) -> anyhow::Result<()> {
    // Checked before anything is written.
    if let Some(name) = args
        .names
        .iter()
        .find(|name| !weir_tls::certs::is_certificate_name(name))
    {
        bail!("--name {name:?} is not a DNS name or an IP address");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let (ca_cert, ca_key) = (args.out.join("ca.pem"), args.out.join("ca.key"));
    let ca = if args.reuse_ca {
        let cert = std::fs::read_to_string(&ca_cert)
            .with_context(|| format!("--reuse-ca: cannot read {}", ca_cert.display()))?;
        let key = std::fs::read_to_string(&ca_key)
            .with_context(|| format!("--reuse-ca: cannot read {}", ca_key.display()))?;
        TestCa::load(&cert, &key).context("--reuse-ca: not a usable CA certificate and key")?
    } else {
        let ca = TestCa::new("weir test CA").context("cannot generate the CA")?;
        write(&ca_cert, &ca.certificate().cert_pem, args.force)?;
        write_key(&ca_key, &ca.certificate().key_pem, args.force)?;
        ca
    };
    let mut written = Vec::new();
    for key_type in &args.key_types {
        let (key_type, stem) = match key_type {
            CertKeyType::Ecdsa => (KeyType::EcdsaP256, "server-ecdsa"),
            CertKeyType::Rsa => (KeyType::Rsa2048, "server-rsa"),
        };
        let issued = ca
            .server(&args.names, key_type, args.days)
            .with_context(|| format!("cannot issue a certificate for {:?}", args.names))?;
        let (cert, key) = (
            args.out.join(format!("{stem}.pem")),
            args.out.join(format!("{stem}.key")),
        );
        write(&cert, &issued.cert_pem, args.force)?;
        write_key(&key, &issued.key_pem, args.force)?;
        written.push((cert, key));
    }
    if let Some(name) = &args.client {
        let issued = ca
            .client(name, KeyType::EcdsaP256, args.days)
            .context("cannot issue the client certificate")?;
        write(&args.out.join("client.pem"), &issued.cert_pem, args.force)?;
        write_key(&args.out.join("client.key"), &issued.key_pem, args.force)?;
    }
    println!("CA: {} (trust this in test clients)", ca_cert.display());
    for (cert, key) in &written {
        println!("server: {} {}", cert.display(), key.display());
    }
    if args.client.is_some() {
        println!(
            "client: {} {}",
            args.out.join("client.pem").display(),
            args.out.join("client.key").display()
        );
    }
    println!("\nIn weir.toml:\n");
    println!("[virtual_servers.secure.tls]");
    let entries: Vec<String> = written
        .iter()
        .map(|(cert, key)| {
            format!(
                "  {{ cert = \"{}\", key = \"{}\" }},",
                cert.display(),
                key.display()
            )
        })
        .collect();
    println!("certificates = [\n{}\n]", entries.join("\n"));
    Ok(())
}

fn write(path: &Path, text: &str, force: bool) -> anyhow::Result<()> {
    if path.exists() && !force {
        bail!("{} exists; pass --force to replace it", path.display());
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Private keys are readable by their owner only.
fn write_key(path: &Path, text: &str, force: bool) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    write(path, text, force)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", path.display()))
}
