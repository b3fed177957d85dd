//! The property the `config` target checks: the configuration loader never
//! panics, whatever the file holds; a rejected file is reported with the
//! file's name; an accepted one is accepted again (validation is a function
//! of the text alone).

/// Checks one input, read as a (lossy) UTF-8 config file.
pub fn check_config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match weir_config::parse_str(&text, "fuzz.toml") {
        Ok(config) => {
            let again =
                weir_config::parse_str(&text, "fuzz.toml").expect("accepted once, accepted again");
            assert_eq!(config, again, "validation is deterministic");
        }
        Err(error) => {
            let shown = error.to_string();
            assert!(
                shown.contains("fuzz.toml"),
                "an error that names no file: {shown}"
            );
        }
    }
}
