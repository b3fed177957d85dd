//! `[fec]`: checked like the rest of the file (every problem with its key path).

use weir_config::KeyPath;

use super::Checker;
use super::schema::FileFec;
use crate::sans_io::fec::wire::MAX_SOURCES;
use crate::sans_io::fec::{FecSettings, Mode};

impl Checker {
    pub(super) fn fec(&mut self, path: &KeyPath, file: Option<&FileFec>) -> FecSettings {
        let defaults = FecSettings::default();
        let Some(file) = file else {
            return defaults;
        };
        let mode = self.choice(
            &path.key("mode"),
            file.mode.as_deref(),
            defaults.mode,
            &[("auto", Mode::Auto), ("on", Mode::On), ("off", Mode::Off)],
            "mode",
        );
        let block = match file.block {
            None => defaults.block,
            Some(block) if (1..=MAX_SOURCES as i64).contains(&block) => block as usize,
            Some(_) => {
                self.report(
                    &path.key("block"),
                    format!("must be between 1 and {MAX_SOURCES} datagrams"),
                );
                defaults.block
            }
        };
        let max_overhead = self.share(
            &path.key("max_overhead"),
            file.max_overhead.as_deref(),
            defaults.max_overhead,
            (0.01, 1.0),
        );
        let min_loss = self.share(
            &path.key("min_loss"),
            file.min_loss.as_deref(),
            defaults.min_loss,
            (0.0001, 0.5),
        );
        FecSettings {
            mode,
            block,
            max_overhead,
            min_loss,
        }
    }

    /// A percentage such as "25%" within `range` (fractions).
    fn share(
        &mut self,
        path: &KeyPath,
        text: Option<&str>,
        default: f64,
        range: (f64, f64),
    ) -> f64 {
        let Some(text) = text else {
            return default;
        };
        match weir_config::units::parse_probability(text) {
            Ok(share) if (range.0..=range.1).contains(&share) => share,
            Ok(_) => {
                self.report(
                    path,
                    format!(
                        "must be between {}% and {}%",
                        range.0 * 100.0,
                        range.1 * 100.0
                    ),
                );
                default
            }
            Err(error) => {
                self.report(path, error);
                default
            }
        }
    }
}
