//! The lot: where idle HTTP/1.1 client connections wait resting or parked.
//!
//! A kept-alive connection's task waits for its next request holding a few hundred
//! bytes (`pipeline.rs`), and the runtime keeps a 256-byte registration of its
//! socket: about 0.8 KiB an idle connection. Two ways to wait for less:
//!
//! - **Resting**, once it has waited its virtual server's `timeouts.rest_idle`: its
//!   task ends, the runtime keeps its socket's registration, and what the connection
//!   needs to go on waits in a table. The waker the runtime holds for the socket is
//!   the lot's ([`Rouse`]): the client's next bytes (or its close) take the
//!   connection out and hand it to a task of the lot's crew (`crew.rs`), with no
//!   system call. About 0.4 KiB.
//! - **Parked**, once a plain connection has waited `timeouts.park_idle` (resting
//!   first, or straight from its task): the socket leaves the runtime too and waits
//!   in one epoll set of the proxy's own, about 0.15 KiB in all. Parking and waking
//!   cost three `epoll_ctl`s, so it is for connections that wait long.
//!
//! What follows is about parked connections; resting ones are swept the same way.
//!
//! One task watches the set for the whole proxy, through the runtime's reactor. Each
//! socket is registered in the set once, on its first park, to report one event
//! (`EPOLLONESHOT`): a later park only re-arms it, and a resume has nothing to undo
//! there. (Adding a socket to a set that another set watches makes the kernel check
//! for loops between sets, under a global lock; re-arming does not.)
//!
//! - Bytes from the client (or its close) resume the connection: its socket goes back
//!   to the runtime and a new task serves it from where it waited
//!   (`pipeline::resume`).
//! - Its idle timeout closes it here, as its task would have: a FIN, no answer.
//! - A drain (shutdown, or a reload that removes its virtual server) resumes it, so
//!   that it ends the way a connection waiting in its task does (a request already on
//!   its way still gets its answer, with `Connection: close`).
//!
//! A parked connection keeps its [`Admission`]: it counts as open, in its client's
//! connection limit, and in the drain.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Wake, Waker};
use std::time::Duration;

use rustix::event::epoll;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use tokio::time::Instant;
use weir_core::ShutdownSignal;

use crate::client::{IdleConnection, ParkedConnection};
use crate::crew::Crew;
use crate::drain::{Admission, Parking, Roused};

/// Serves an idle connection in a task of its own from where it waited (given by the
/// proxy: `pipeline.rs`).
#[derive(Clone, Copy)]
pub(crate) struct Resume {
    /// A parked one, whose task first waits for the runtime to see its socket
    /// readable (`pipeline::spawn_resumed`).
    pub(crate) parked: fn(IdleConnection, Admission, ShutdownSignal),
    /// A resting one, which the runtime saw readable or a drain ends: served at once,
    /// by the lot's crew (`pipeline::spawn_rested`).
    pub(crate) rested: fn(IdleConnection, Admission, ShutdownSignal),
}

/// How often the table is looked through even when no idle timeout is due: a
/// virtual server removed by a reload has its parked connections resumed (to end)
/// within this.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The least time between two sweeps, however soon the next idle timeout: a parked
/// connection is closed up to this late, and a table of many connections is not
/// looked through more often.
const SWEEP_GAP: Duration = Duration::from_millis(100);

/// Readiness events taken from the set per system call.
const EVENTS: usize = 256;

/// Entries per page of the table: pages are added as it grows and kept, so that
/// growing never copies the table (nor holds two copies at once).
const PAGE: usize = 256;

/// A connection waiting in the lot with what its task held: a [`Parked`] one, out of
/// the runtime, or a [`Resting`] one, whose socket is still the runtime's (which holds a
/// [`Rouse`] for it).
struct InLot<C> {
    connection: C,
    admission: Admission,
    /// What ends the connection: shutdown, or its virtual server's removal.
    signal: ShutdownSignal,
}

type Parked = InLot<ParkedConnection>;
type Resting = InLot<IdleConnection>;

impl<C> InLot<C> {
    /// Its drain began.
    fn ended(&self) -> bool {
        self.signal.has_ended()
    }
}

impl Resting {
    /// Its parts, out of the resting table (and of the count of those resting).
    fn leave(self) -> (IdleConnection, Admission, ShutdownSignal) {
        self.admission.vs.metrics.connections_resting.dec();
        (self.connection, self.admission, self.signal)
    }
}

/// When the lot next has something to do with a connection waiting in it.
trait Due {
    fn due(&self) -> Instant;
}

impl Due for Parked {
    /// Its idle timeout.
    fn due(&self) -> Instant {
        self.connection.deadline(&self.admission.vs)
    }
}

impl Due for Resting {
    /// Its idle timeout, or parking it.
    fn due(&self) -> Instant {
        let vs = &self.admission.vs;
        let deadline = self.connection.deadline(vs);
        self.connection
            .park_at(vs)
            .map_or(deadline, |park| park.min(deadline))
    }
}

/// The proxy's lot (one per running proxy, in its `Drain`).
pub(crate) struct Lot {
    /// The epoll set (its task waits on it through the runtime).
    set: OwnedFd,
    table: Mutex<Table<Parked>>,
    resting: Mutex<Table<Resting>>,
    /// A connection was parked or rested with a deadline before the next sweep.
    sooner: Notify,
    resume: Resume,
    /// Serves the resting connections the runtime rouses (`crew.rs`).
    crew: Crew<Roused>,
    /// The lot, as the wakers of resting connections hold it (they must not keep
    /// it: the runtime holds them).
    me: Weak<Lot>,
}

impl std::fmt::Debug for Lot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lot")
            .field("parked", &self.table().len())
            .field("resting", &self.resting().len())
            .finish()
    }
}

/// The places of parked (or resting) connections. A token (an event's data, or a
/// [`Rouse`]'s) is a place and the place's generation, so that an event left armed
/// (or a waker left with the runtime) for a connection that has since gone (see
/// [`Lot::enter`]) cannot wake another that took its place.
struct Table<E> {
    /// Entries by place: page `place / PAGE`, index `place % PAGE`.
    pages: Vec<Box<[Slot<E>]>>,
    /// Empty places.
    free: Vec<u32>,
    /// When the task looks through the table next (`None`: nothing is parked).
    next_sweep: Option<Instant>,
    /// No entry is due before this (`None`: none is in the table). Entries that
    /// left since it was worked out do not raise it, so it may be early: then a
    /// sweep works out each entry's due time and finds none due.
    due_by: Option<Instant>,
    /// Nothing is parked any more (shutdown).
    closed: bool,
}

impl<E> Default for Table<E> {
    fn default() -> Self {
        Table {
            pages: Vec::new(),
            free: Vec::new(),
            next_sweep: None,
            due_by: None,
            closed: false,
        }
    }
}

struct Slot<E> {
    generation: u32,
    parked: Option<E>,
}

impl<E> Default for Slot<E> {
    fn default() -> Self {
        Slot {
            generation: 0,
            parked: None,
        }
    }
}

fn token(place: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(place)
}

impl<E> Table<E> {
    fn slot(&mut self, place: u32) -> Option<&mut Slot<E>> {
        let place = place as usize;
        self.pages.get_mut(place / PAGE)?.get_mut(place % PAGE)
    }

    /// An empty place, adding a page if none is left, and the token it is parked
    /// under.
    fn place(&mut self) -> (u32, u64) {
        if self.free.is_empty() {
            let first = (self.pages.len() * PAGE) as u32;
            self.pages
                .push((0..PAGE).map(|_| Slot::default()).collect());
            // Handed out lowest first.
            self.free.extend((first..first + PAGE as u32).rev());
        }
        let place = self.free.pop().unwrap_or_default();
        let generation = self.slot(place).map_or(0, |slot| slot.generation);
        (place, token(place, generation))
    }

    fn insert(&mut self, place: u32, parked: E) {
        if let Some(slot) = self.slot(place) {
            slot.parked = Some(parked);
        }
    }

    /// Gives back a place taken for a connection that did not go in, whose token may
    /// have been handed out: the place's next token will not match it.
    fn release(&mut self, place: u32) {
        if let Some(slot) = self.slot(place) {
            slot.generation = slot.generation.wrapping_add(1);
            self.free.push(place);
        }
    }

    /// The connection parked under `token`, if it still is.
    fn take(&mut self, token: u64) -> Option<E> {
        let place = token as u32;
        let slot = self.slot(place)?;
        if token != self::token(place, slot.generation) {
            return None;
        }
        let parked = slot.vacate()?;
        self.free.push(place);
        Some(parked)
    }

    /// Takes out every parked connection `pick` chooses, looking at each place once.
    fn take_where(&mut self, mut pick: impl FnMut(&E) -> bool) -> Vec<E> {
        let mut taken = Vec::new();
        for (page, slots) in self.pages.iter_mut().enumerate() {
            for (index, slot) in slots.iter_mut().enumerate() {
                if slot.parked.as_ref().is_some_and(&mut pick) {
                    taken.extend(slot.vacate());
                    self.free.push((page * PAGE + index) as u32);
                }
            }
        }
        taken
    }

    /// How many connections are parked.
    fn len(&self) -> usize {
        self.pages
            .iter()
            .flat_map(|slots| slots.iter())
            .filter(|slot| slot.parked.is_some())
            .count()
    }
}

impl<C> Table<InLot<C>>
where
    InLot<C>: Due,
{
    /// Puts a connection in its place, to be swept when it is due (and within
    /// [`SWEEP_EVERY`], for a drain); whether that moved the next sweep sooner.
    fn settle(&mut self, place: u32, entry: InLot<C>) -> bool {
        let due = entry.due();
        self.due_by = Some(self.due_by.map_or(due, |by| by.min(due)));
        self.insert(place, entry);
        // The next sweep was set no later than SWEEP_EVERY after the moment it was set
        // (here or in `take_due`), so no later than SWEEP_EVERY from now: when it is no
        // later than this entry's due time either, it stays, and the clock is not read.
        if self.next_sweep.is_some_and(|next| next <= due) {
            return false;
        }
        let due = due.min(Instant::now() + SWEEP_EVERY);
        let sooner = self.next_sweep.is_none_or(|next| due < next);
        if sooner {
            self.next_sweep = Some(due);
        }
        sooner
    }

    /// Takes out the connections due by `now` or whose drain began, and sets the next
    /// sweep by those left (within [`SWEEP_EVERY`], for drains).
    ///
    /// Before the earliest due time ([`Table::due_by`]) only drains are looked for: a
    /// sweep every [`SWEEP_EVERY`] then costs one load per entry, not the working out
    /// of its due time from its virtual server's timeouts (a lot of many connections
    /// that each wait less than `park_idle` is swept so, and never finds one due).
    fn take_due(&mut self, now: Instant) -> Vec<InLot<C>> {
        let any_due = self.due_by.is_none_or(|by| by <= now);
        // The earliest due time of those left (when any is due), and whether any is left.
        let mut next: Option<Instant> = None;
        let mut left = false;
        let done = self.take_where(|waiting| {
            let out = waiting.ended()
                || (any_due && {
                    let due = waiting.due();
                    if due > now {
                        next = Some(next.map_or(due, |next| next.min(due)));
                    }
                    due <= now
                });
            left |= !out;
            out
        });
        self.due_by = match any_due {
            true => next,
            false => self.due_by.filter(|_| left),
        };
        self.next_sweep = self.due_by.map(|by| by.min(now + SWEEP_EVERY));
        done
    }
}

impl<E> Slot<E> {
    /// Its connection, out; the place's next token will not match the one it had.
    fn vacate(&mut self) -> Option<E> {
        let parked = self.parked.take()?;
        self.generation = self.generation.wrapping_add(1);
        Some(parked)
    }
}

impl Lot {
    /// A lot and its task (inside the runtime); the task ends at `shutdown`, resuming
    /// every connection parked then. `resume` serves a connection taken out of the lot.
    pub(crate) fn open(shutdown: ShutdownSignal, resume: Resume) -> io::Result<Arc<Lot>> {
        let set = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let watched = watched(set.try_clone()?)?;
        let lot = Arc::new_cyclic(|me| Lot {
            set,
            table: Mutex::new(Table::default()),
            resting: Mutex::new(Table::default()),
            sooner: Notify::new(),
            resume,
            crew: Crew::default(),
            me: me.clone(),
        });
        tokio::spawn(watch(Arc::clone(&lot), watched, shutdown));
        Ok(lot)
    }

    fn table(&self) -> MutexGuard<'_, Table<Parked>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn resting(&self) -> MutexGuard<'_, Table<Resting>> {
        self.resting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When the task looks through the tables next (`None`: nothing waits in them).
    fn next_sweep(&self) -> Option<Instant> {
        let parked = self.table().next_sweep;
        parked.into_iter().chain(self.resting().next_sweep).min()
    }

    /// Parks a connection; `Err` gives it back when the lot has closed or its socket
    /// could not join the set.
    ///
    /// A socket parked before is still in the set, its one event spent (it woke it)
    /// or still armed (a drain resumed it): re-armed under its new token. Only a
    /// socket new to the set is added.
    fn enter(&self, parked: Parked) -> Result<(), Box<Parked>> {
        let mut table = self.table();
        if table.closed {
            return Err(Box::new(parked));
        }
        let (place, token) = table.place();
        // Armed with the table locked: an event for it waits for the entry. Bytes
        // that came before are reported at once.
        let socket = parked.connection.socket().as_fd();
        let flags = epoll::EventFlags::IN | epoll::EventFlags::RDHUP | epoll::EventFlags::ONESHOT;
        let data = epoll::EventData::new_u64(token);
        let armed = match epoll::modify(&self.set, socket, data, flags) {
            Err(rustix::io::Errno::NOENT) => epoll::add(&self.set, socket, data, flags),
            armed => armed,
        };
        if armed.is_err() {
            table.free.push(place);
            return Err(Box::new(parked));
        }
        parked.admission.vs.metrics.connections_parked.inc();
        let sooner = table.settle(place, parked);
        drop(table);
        if sooner {
            self.sooner.notify_one();
        }
        Ok(())
    }

    /// Serves a connection out of the table (or one it did not take) in a task of its
    /// own again; one whose socket cannot rejoin the runtime is closed.
    fn resume(&self, parked: Parked) {
        let Parked {
            connection,
            admission,
            signal,
        } = parked;
        if let Ok(idle) = connection.resume() {
            (self.resume.parked)(idle, admission, signal);
        }
    }

    /// Closes the lot to new connections and takes out those parked and resting; its
    /// crew's waiting members leave.
    fn close_all(&self) -> (Vec<Parked>, Vec<Resting>) {
        self.crew.close();
        let mut table = self.table();
        table.closed = true;
        let parked = table.take_where(|_| true);
        drop(table);
        let mut resting = self.resting();
        resting.closed = true;
        (parked, resting.take_where(|_| true))
    }
}

impl Parking for Lot {
    fn park(&self, idle: IdleConnection, admission: Admission, shutdown: ShutdownSignal) {
        let connection = match idle.park() {
            Ok(connection) => connection,
            Err(Some(idle)) => return (self.resume.parked)(idle, admission, shutdown),
            // Its socket would not leave the runtime: it closes.
            Err(None) => return,
        };
        let parked = Parked {
            connection,
            admission,
            signal: shutdown,
        };
        if let Err(parked) = self.enter(parked) {
            self.resume(*parked);
        }
    }

    fn rest(&self, idle: IdleConnection, admission: Admission, shutdown: ShutdownSignal) {
        let mut resting = self.resting();
        if resting.closed {
            drop(resting);
            // Shutdown: its task waits as a resumed one does, and ends with the drain.
            return (self.resume.parked)(idle, admission, shutdown);
        }
        let (place, token) = resting.place();
        let rouse = Waker::from(Arc::new(Rouse {
            lot: self.me.clone(),
            token,
        }));
        // With the table locked: a wake that comes at once waits for the entry.
        if idle.rouse_on_bytes(&rouse) {
            // Bytes came since its task last looked.
            resting.release(place);
            drop(resting);
            return (self.resume.rested)(idle, admission, shutdown);
        }
        let entry = Resting {
            connection: idle,
            admission,
            signal: shutdown,
        };
        entry.admission.vs.metrics.connections_resting.inc();
        let sooner = resting.settle(place, entry);
        drop(resting);
        if sooner {
            self.sooner.notify_one();
        }
    }

    fn crew(&self) -> &Crew<Roused> {
        &self.crew
    }
}

/// The waker the runtime holds for a resting connection's socket: the client's bytes
/// (or its close, or an error) take the connection out of the table and hand it to the
/// lot's crew.
struct Rouse {
    lot: Weak<Lot>,
    /// The connection's place in the resting table, and its generation.
    token: u64,
}

impl Wake for Rouse {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(lot) = self.lot.upgrade() else {
            return;
        };
        let resting = lot.resting().take(self.token);
        if let Some(resting) = resting {
            roused(&lot, resting);
        }
    }
}

/// A connection out of the resting table, served by a task again. Outside a runtime
/// (its reactor woke every waker as it shut down) it is closed instead.
fn roused(lot: &Lot, resting: Resting) {
    let (idle, admission, signal) = resting.leave();
    if tokio::runtime::Handle::try_current().is_ok() {
        (lot.resume.rested)(idle, admission, signal);
    }
}

/// A resting connection the sweep took out: a drain resumes it (to end), its idle
/// timeout closes it, and its parking time parks it.
fn rested_due(lot: &Lot, resting: Resting, now: Instant) {
    if resting.ended() {
        return roused(lot, resting);
    }
    let (idle, admission, signal) = resting.leave();
    if idle.deadline(&admission.vs) <= now {
        tokio::spawn(async move {
            idle.close().await;
            drop(admission);
        });
    } else {
        lot.park(idle, admission, signal);
    }
}

/// A connection out of the table, back to a task (it stays in the set, disarmed or
/// armed for one event that its token no longer matches).
fn unparked(lot: &Lot, parked: Parked) {
    parked.admission.vs.metrics.connections_parked.dec();
    lot.resume(parked);
}

/// A connection out of the table whose idle timeout passed: closing its socket takes
/// it out of the set.
fn expired(parked: Parked) {
    parked.admission.vs.metrics.connections_parked.dec();
    parked.connection.close();
}

/// The set, registered with the runtime's reactor for readability.
///
/// tokio deprecates its safe `AsyncFd` constructors (I/O safety: the object must keep
/// the same open descriptor for as long as it is registered) for `unsafe` ones, which
/// this crate does not allow. An `OwnedFd` holds its descriptor from its creation to
/// its drop and is owned by the `AsyncFd` here, so the safe one's condition holds.
#[allow(deprecated)]
fn watched(set: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(set, tokio::io::Interest::READABLE)
}

/// The lot's task: resumes the connections the set reports, and sweeps the table
/// for idle timeouts and drains.
async fn watch(lot: Arc<Lot>, set: AsyncFd<OwnedFd>, shutdown: ShutdownSignal) {
    // Dropped with the runtime before a shutdown, the task closes what is parked (and
    // so lets go of the drain each entry holds, which holds the lot).
    let _closer = CloseOnDrop(Arc::clone(&lot));
    let mut woken = Vec::new();
    let mut last_sweep = Instant::now();
    // One timer for all sweeps, moved only when the next one changes.
    let mut sweep_due = std::pin::pin!(tokio::time::sleep_until(last_sweep + SWEEP_EVERY));
    loop {
        let next_sweep = lot
            .next_sweep()
            .map(|next| next.max(last_sweep + SWEEP_GAP));
        if let Some(next) = next_sweep
            && sweep_due.deadline() != next
        {
            sweep_due.as_mut().reset(next);
        }
        tokio::select! {
            biased;
            () = shutdown.triggered() => break,
            ready = set.readable() => {
                let Ok(mut ready) = ready else {
                    break;
                };
                match take_ready(&lot, set.get_ref(), &mut woken) {
                    Ok(taken) if taken < EVENTS => {
                        // All taken: wait for the set to report more (a report that
                        // came since this wait began keeps it ready).
                        ready.clear_ready();
                    }
                    Ok(_) => {}
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(error) => {
                        tracing::error!(%error, "the lot of parked connections failed; resuming them");
                        break;
                    }
                }
                for parked in woken.drain(..) {
                    unparked(&lot, parked);
                }
            }
            () = &mut sweep_due, if next_sweep.is_some() => {
                sweep(&lot);
                last_sweep = Instant::now();
            }
            () = lot.sooner.notified() => {}
        }
    }
    // Shutdown (or a failed set): every connection goes back to a task, which ends it
    // as the drain says, and nothing is parked from now on.
    let (parked, resting) = lot.close_all();
    for parked in parked {
        unparked(&lot, parked);
    }
    for resting in resting {
        roused(&lot, resting);
    }
}

/// See [`watch`].
struct CloseOnDrop(Arc<Lot>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        let (parked, resting) = self.0.close_all();
        for parked in parked {
            expired(parked);
        }
        for resting in resting {
            // Dropped: its socket closes.
            drop(resting.leave());
        }
    }
}

/// Takes the events the set has ready (up to [`EVENTS`], without waiting) and the
/// connections they are for out of the table; how many events there were.
fn take_ready(lot: &Lot, set: &OwnedFd, woken: &mut Vec<Parked>) -> rustix::io::Result<usize> {
    let mut events = [const { MaybeUninit::<epoll::Event>::uninit() }; EVENTS];
    let no_wait = rustix::event::Timespec::default();
    let (ready, _) = epoll::wait(set, &mut events, Some(&no_wait))?;
    let mut table = lot.table();
    woken.extend(
        ready
            .iter()
            .filter_map(|event| table.take(event.data.u64())),
    );
    Ok(ready.len())
}

/// Closes the parked and resting connections whose idle timeout passed, resumes those
/// a drain ends, parks resting ones at their parking time, and sets the next sweep.
fn sweep(lot: &Lot) {
    let now = Instant::now();
    let done = lot.table().take_due(now);
    for parked in done {
        if parked.ended() {
            unparked(lot, parked);
        } else {
            expired(parked);
        }
    }
    let done = lot.resting().take_due(now);
    for resting in done {
        rested_due(lot, resting, now);
    }
}
