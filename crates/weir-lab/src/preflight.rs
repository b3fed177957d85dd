//! Checks before anything starts: open files for the clients and for weir, source addresses
//! for the ephemeral ports, the kernel's accept-queue cap. Each either fits the run to the
//! machine (with a note saying what was changed and how to avoid it) or stops it with a
//! clear message.

use crate::error::LabError;

/// File descriptors a process needs besides its connections (listeners, epoll, logs).
const FD_MARGIN: u64 = 100;
/// Client connections per 127.0.0.x source address: well under the ~28k ephemeral ports,
/// leaving room for the previous phase's TIME_WAIT and for reconnects.
pub const CLIENTS_PER_SOURCE: u32 = 2_000;
/// Source addresses 127.0.0.2 … 127.0.0.(1 + this) at most.
pub const MAX_SOURCES: u8 = 250;

/// The offload load as it will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadFit {
    pub clients: u32,
    pub sources: u8,
    pub notes: Vec<String>,
}

/// Refuses a layer-4 run the open-file limit cannot hold: the lab's own process holds each
/// client's end and, run directly, the in-process service's end of each connection too; a
/// client short of a descriptor would be counted as a failure of what is measured.
pub fn fit_l4(clients: u32, open_files: u64) -> Result<(), LabError> {
    let needed = 2 * u64::from(clients) + FD_MARGIN;
    if needed > open_files {
        return Err(LabError::Preflight(format!(
            "the open-file limit is {open_files}: {clients} clients need {needed} descriptors \
             in the lab (each client's end, and the service's end when run directly); lower \
             --clients to {} or raise the limit (ulimit -n, or the hard limit in \
             /etc/security/limits.conf)",
            open_files.saturating_sub(FD_MARGIN) / 2
        )));
    }
    Ok(())
}

/// Fits the offload experiment to the open-file limit and the ephemeral ports.
///
/// The clients' process holds one descriptor per client; weir holds one per client plus its
/// pool to the origin. Past the limit the clients are lowered (with a note); with no room
/// at all the run stops.
pub fn fit_offload(
    clients: u32,
    pool_cap: u32,
    sources: Option<u8>,
    open_files: u64,
    port_range: (u16, u16),
) -> Result<OffloadFit, LabError> {
    let mut notes = Vec::new();
    let room = open_files.saturating_sub(u64::from(pool_cap) + FD_MARGIN);
    if room == 0 {
        return Err(LabError::Preflight(format!(
            "the open-file limit is {open_files}: too low for a pool of {pool_cap} connections \
             and any client; raise it (ulimit -n, or the hard limit in /etc/security/limits.conf)"
        )));
    }
    let fitted = if u64::from(clients) > room {
        let fitted = u32::try_from(room).unwrap_or(u32::MAX);
        notes.push(format!(
            "open-file limit {open_files}: {clients} clients need {} descriptors in weir; \
             ran {fitted} clients instead (raise the hard limit with ulimit -Hn or \
             /etc/security/limits.conf for more)",
            u64::from(clients) + u64::from(pool_cap) + FD_MARGIN
        ));
        fitted
    } else {
        clients
    };
    let ports = u32::from(port_range.1.saturating_sub(port_range.0)) + 1;
    let per_source = CLIENTS_PER_SOURCE.min(ports / 4).max(1);
    let needed = fitted.div_ceil(per_source);
    let sources = match sources {
        Some(0) => {
            return Err(LabError::Invalid("--sources must be at least 1".to_owned()));
        }
        Some(given) => {
            if u32::from(given) < needed {
                notes.push(format!(
                    "--sources {given}: {} clients per 127.0.0.x source address leaves little \
                     room in its {ports} ephemeral ports; {needed} would be safer",
                    fitted.div_ceil(u32::from(given))
                ));
            }
            given
        }
        None => u8::try_from(needed.max(1))
            .unwrap_or(MAX_SOURCES)
            .min(MAX_SOURCES),
    };
    if sources > MAX_SOURCES {
        return Err(LabError::Invalid(format!(
            "--sources must be at most {MAX_SOURCES}"
        )));
    }
    Ok(OffloadFit {
        clients: fitted,
        sources,
        notes,
    })
}

/// A note when the kernel caps listen backlogs below what a fast ramp needs.
pub fn backlog_note(somaxconn: Option<u32>) -> Option<String> {
    match somaxconn {
        Some(cap) if cap < 1024 => Some(format!(
            "net.core.somaxconn is {cap}: accept queues are capped there, so a fast ramp may \
             see connect delays (sysctl -w net.core.somaxconn=4096)"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORTS: (u16, u16) = (32768, 60999);

    #[test]
    fn full_size_fits_a_20000_file_limit_with_eight_sources() {
        let fit = fit_offload(16_000, 500, None, 20_000, PORTS).expect("fits");
        assert_eq!(fit.clients, 16_000);
        assert_eq!(fit.sources, 8);
        assert!(fit.notes.is_empty());
    }

    #[test]
    fn too_many_clients_for_the_limit_are_lowered_with_a_note() {
        let fit = fit_offload(16_000, 500, Some(8), 10_000, PORTS).expect("fits");
        assert_eq!(fit.clients, 9_400);
        assert_eq!(fit.notes.len(), 1);
        assert!(fit.notes[0].contains("ran 9400 clients"), "{:?}", fit.notes);
    }

    #[test]
    fn no_room_at_all_stops_the_run() {
        let error = fit_offload(100, 500, None, 256, PORTS).expect_err("no room");
        assert!(error.to_string().contains("open-file limit is 256"));
        assert!(fit_offload(10, 5, Some(0), 20_000, PORTS).is_err());
    }

    /// A layer-4 run the limit cannot hold is refused before it starts, saying how many
    /// clients would fit, rather than measured as clients failing.
    #[test]
    fn a_layer4_run_past_the_open_file_limit_is_refused() {
        assert!(fit_l4(1_500, 20_000).is_ok());
        let error = fit_l4(1_500, 512).expect_err("no room").to_string();
        assert!(
            error.contains("open-file limit is 512") && error.contains("--clients to 206"),
            "{error}"
        );
    }

    #[test]
    fn too_few_sources_are_kept_but_noted() {
        let fit = fit_offload(16_000, 500, Some(1), 20_000, PORTS).expect("fits");
        assert_eq!(fit.sources, 1);
        assert!(fit.notes[0].contains("would be safer"));
        // A tiny range shrinks the share per source.
        let fit = fit_offload(1_000, 10, None, 20_000, (40000, 40999)).expect("fits");
        assert_eq!(fit.sources, 4);
    }

    #[test]
    fn small_somaxconn_is_noted() {
        assert!(backlog_note(Some(128)).is_some());
        assert!(backlog_note(Some(4096)).is_none());
        assert!(backlog_note(None).is_none());
    }
}
