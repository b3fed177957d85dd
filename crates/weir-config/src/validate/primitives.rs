//! Checks shared by every section: names, choices, durations, sizes and counts.
//! Each records a problem and returns the default when the value is wrong.

use std::num::NonZeroU32;
use std::ops::RangeInclusive;
use std::time::Duration;

use super::values::{self, show_size};
use super::{Checker, Zero};
use crate::error::KeyPath;
use crate::schema::{DurationText, SizeValue};
use crate::units::MAX_DURATION;

impl Checker {
    pub(super) fn name(&mut self, path: &KeyPath, name: &str) {
        if let Err(message) = values::name(name) {
            self.report(path, message);
        }
    }

    pub(super) fn choice<T: Copy>(
        &mut self,
        path: &KeyPath,
        value: Option<&str>,
        default: T,
        options: &[(&str, T)],
    ) -> T {
        let Some(value) = value else {
            return default;
        };
        if let Some((_, choice)) = options.iter().find(|(name, _)| *name == value.trim()) {
            return *choice;
        }
        let names: Vec<String> = options
            .iter()
            .map(|(name, _)| format!("\"{name}\""))
            .collect();
        self.report(
            path,
            format!(
                "invalid value \"{value}\"; expected one of {}",
                names.join(", ")
            ),
        );
        default
    }

    pub(super) fn duration(
        &mut self,
        path: &KeyPath,
        value: Option<&DurationText>,
        default: Duration,
        zero: Zero,
    ) -> Duration {
        self.duration_within(path, value, (default, zero), (MAX_DURATION, "a day"))
    }

    /// [`Checker::duration`] for a key whose values may run past a day (a cookie's
    /// lifetime, not a timeout): at most `max`, named `max_text` in the error.
    pub(super) fn duration_within(
        &mut self,
        path: &KeyPath,
        value: Option<&DurationText>,
        (default, zero): (Duration, Zero),
        (max, max_text): (Duration, &str),
    ) -> Duration {
        let Some(DurationText(text)) = value else {
            return default;
        };
        match crate::units::parse_duration(text) {
            Err(message) => self.report(path, message),
            Ok(duration) if duration.is_zero() && zero == Zero::Rejected => {
                self.report(path, "must be longer than zero")
            }
            // Timers tick in milliseconds: a shorter wait would act as none at all.
            Ok(duration) if !duration.is_zero() && duration < Duration::from_millis(1) => self
                .report(
                    path,
                    format!("\"{text}\" is shorter than a millisecond, the timers' resolution"),
                ),
            Ok(duration) if duration > max => self.report(
                path,
                format!(
                    "\"{text}\" is longer than {max_text}; write it like \"30s\", \"5m\" or \"1h\""
                ),
            ),
            Ok(duration) => return duration,
        }
        default
    }

    pub(super) fn size(
        &mut self,
        path: &KeyPath,
        value: Option<&SizeValue>,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> u64 {
        let bytes = match value {
            None => return default,
            Some(SizeValue::Bytes(bytes)) => {
                u64::try_from(*bytes).map_err(|_| "must not be negative".to_owned())
            }
            Some(SizeValue::Text(text)) => crate::units::parse_size(text),
        };
        match bytes {
            Err(message) => self.report(path, message),
            Ok(bytes) if bytes < *range.start() => self.report(
                path,
                format!("must be at least {}", show_size(*range.start())),
            ),
            Ok(bytes) if bytes > *range.end() => {
                self.report(path, format!("must be at most {}", show_size(*range.end())))
            }
            Ok(bytes) => return bytes,
        }
        default
    }

    pub(super) fn size_usize(
        &mut self,
        path: &KeyPath,
        value: Option<&SizeValue>,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> usize {
        let bytes = self.size(path, value, default, range);
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }

    pub(super) fn count(
        &mut self,
        path: &KeyPath,
        value: Option<i64>,
        default: u32,
        range: RangeInclusive<u32>,
    ) -> u32 {
        let Some(value) = value else {
            return default;
        };
        match u32::try_from(value) {
            Ok(count) if range.contains(&count) => return count,
            // Too small: name the bound it missed (a value past u32 is too large).
            _ if *range.end() == u32::MAX && value < i64::from(*range.start()) => {
                self.report(path, format!("must be at least {}", range.start()))
            }
            _ => self.report(
                path,
                format!("must be between {} and {}", range.start(), range.end()),
            ),
        }
        default
    }

    pub(super) fn nonzero(
        &mut self,
        path: &KeyPath,
        value: Option<i64>,
        default: NonZeroU32,
        range: RangeInclusive<u32>,
    ) -> NonZeroU32 {
        let count = self.count(path, value, default.get(), range);
        NonZeroU32::new(count).unwrap_or(default)
    }

    /// A cap where 0 or absence means no cap.
    pub(super) fn optional_limit(
        &mut self,
        path: &KeyPath,
        value: Option<i64>,
    ) -> Option<NonZeroU32> {
        let value = value?;
        match u32::try_from(value) {
            Ok(count) => NonZeroU32::new(count),
            Err(_) => {
                self.report(
                    path,
                    format!("must be between 0 (no limit) and {}", u32::MAX),
                );
                None
            }
        }
    }
}
