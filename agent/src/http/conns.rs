//! The connection cap, and who makes room when it is reached.
//!
//! A connection is *busy* while one of its requests is being handled, and
//! *idle* otherwise: between keep-alive requests, and — the point of all
//! this — while a client is still sending (or pretending to send) a request
//! head. At the cap a new connection evicts the connection that has been idle
//! longest, so sockets that do no work (slowloris, a flood of silent
//! connects, a leaky client pool) cannot keep a real request out; only when
//! every connection is busy is the newcomer turned away, at once, with 429.
//!
//! Why not the alternatives: a semaphore before `accept` leaves the newcomer
//! in the listen backlog until an idle socket times out (up to
//! [`crate::http::server::HEADER_READ_TIMEOUT`]); a per-IP cap does not help when
//! the flood comes from several pods, and can shut out the backend when it
//! shares a source address (SNAT) with the flood.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::Notify;

/// The table of live connections. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Conns {
    inner: Arc<Mutex<Table>>,
    cap: usize,
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    live: HashMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    /// Requests of this connection being handled right now.
    busy: usize,
    /// When it last became idle (or was accepted).
    idle_since: Instant,
    evict: Arc<Notify>,
}

/// What to do with a connection just accepted.
#[derive(Debug)]
pub enum Admit {
    /// Serve it. Dropping the [`Conn`] frees its place. `evicted`: another
    /// connection was told to close to make room.
    Serve { conn: Conn, evicted: bool },
    /// Every connection is busy: answer 429 and close.
    Refuse,
}

impl Conns {
    pub fn new(cap: usize) -> Self {
        Conns {
            inner: Arc::default(),
            cap,
        }
    }

    /// Live connections, not counting evicted ones still closing.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().live.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes a place for a new connection, evicting the longest-idle one
    /// when the table is full.
    pub fn admit(&self) -> Admit {
        let mut t = self.lock();
        let mut evicted = false;
        if t.live.len() >= self.cap {
            let victim = t
                .live
                .iter()
                .filter(|(_, e)| e.busy == 0)
                .min_by_key(|(id, e)| (e.idle_since, **id))
                .map(|(id, _)| *id);
            match victim {
                Some(id) => {
                    if let Some(e) = t.live.remove(&id) {
                        e.evict.notify_one();
                        evicted = true;
                    }
                }
                None => return Admit::Refuse,
            }
        }
        let id = t.next_id;
        t.next_id += 1;
        let evict = Arc::new(Notify::new());
        t.live.insert(
            id,
            Entry {
                busy: 0,
                idle_since: Instant::now(),
                evict: evict.clone(),
            },
        );
        Admit::Serve {
            conn: Conn {
                id,
                evict,
                conns: self.clone(),
            },
            evicted,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table holds plain data; a panic elsewhere cannot corrupt it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One connection's place in the table.
#[derive(Debug)]
pub struct Conn {
    id: u64,
    evict: Arc<Notify>,
    conns: Conns,
}

impl Conn {
    /// Resolves when this connection has been chosen to make room: the
    /// connection task then drops the connection, closing the socket.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }

    /// Marks a request as being handled until the guard is dropped.
    pub fn busy(&self) -> Busy {
        if let Some(e) = self.conns.lock().live.get_mut(&self.id) {
            e.busy += 1;
        }
        Busy {
            id: self.id,
            conns: self.conns.clone(),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.conns.lock().live.remove(&self.id);
    }
}

/// A request in progress; see [`Conn::busy`].
#[derive(Debug)]
pub struct Busy {
    id: u64,
    conns: Conns,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(e) = self.conns.lock().live.get_mut(&self.id) {
            e.busy = e.busy.saturating_sub(1);
            if e.busy == 0 {
                e.idle_since = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn serve(a: Admit) -> Conn {
        match a {
            Admit::Serve { conn, .. } => conn,
            Admit::Refuse => panic!("refused"),
        }
    }

    fn is_evicted(c: &Conn) -> bool {
        let fut = c.evicted();
        tokio::pin!(fut);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        fut.as_mut().poll(&mut cx).is_ready()
    }

    #[test]
    fn at_the_cap_the_longest_idle_connection_makes_room() {
        let conns = Conns::new(3);
        let a = serve(conns.admit());
        std::thread::sleep(Duration::from_millis(2));
        let b = serve(conns.admit());
        let c = serve(conns.admit());
        // `a` handles a request and finishes it: it is now the newest idle.
        drop(a.busy());
        let d = serve(conns.admit());
        assert!(is_evicted(&b), "b was idle longest");
        assert!(!is_evicted(&a) && !is_evicted(&c) && !is_evicted(&d));
        assert_eq!(conns.len(), 3);
        drop(b); // its task ends; nothing changes
        assert_eq!(conns.len(), 3);
    }

    #[test]
    fn busy_connections_are_never_evicted_and_a_full_busy_table_refuses() {
        let conns = Conns::new(2);
        let a = serve(conns.admit());
        let b = serve(conns.admit());
        let _ga = a.busy();
        let gb = b.busy();
        assert!(matches!(conns.admit(), Admit::Refuse));
        drop(gb);
        let _c = serve(conns.admit());
        assert!(is_evicted(&b));
        assert!(!is_evicted(&a));
    }

    #[test]
    fn dropping_a_connection_frees_its_place() {
        let conns = Conns::new(1);
        let a = serve(conns.admit());
        drop(a);
        assert!(conns.is_empty());
        let b = serve(conns.admit());
        assert!(!is_evicted(&b));
    }
}
