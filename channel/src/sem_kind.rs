//! Which semaphores a channel uses, and which of a worker's four is meant:
//! the words the configuration (names), the layout (offsets) and the
//! semaphore set share. A leaf: it uses no other module of the crate.

/// Which semaphores carry the hand-offs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SemKind {
    /// glibc named semaphores `<name>_request_produce_<i>`, …: a C or C++
    /// process using `sem_open` can take a worker's place.
    Named,
    /// Futex semaphores inside the response region: the fast path.
    #[default]
    InRegion,
}

/// Which way a semaphore hands over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Coordinator to worker.
    Request,
    /// Worker to coordinator.
    Response,
}

impl Direction {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Direction::Request => "request",
            Direction::Response => "response",
        }
    }
}

/// What a semaphore counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Free slots the writer may fill (starts at the depth, or 1).
    Produce,
    /// Filled slots the reader may take (starts at 0).
    Consume,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Produce => "produce",
            Role::Consume => "consume",
        }
    }
}
