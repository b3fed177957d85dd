//! Log lines captured in unit tests.

use std::sync::{Arc, Mutex};

/// Log lines written while `act` runs.
pub(crate) fn logged(act: impl FnOnce()) -> String {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let writer = Arc::clone(&lines);
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || Writer(Arc::clone(&writer)))
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, act);
    String::from_utf8(lines.lock().unwrap().clone()).unwrap()
}

struct Writer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Writer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
