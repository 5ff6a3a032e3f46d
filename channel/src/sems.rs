//! The semaphore set of a channel: four per worker, named or in the
//! response region, behind one accessor.

use nodeipc_sem::{NamedSemaphore, Semaphore, ShmSemaphore};
use nodeipc_shm::Region;

use crate::config::ChannelConfig;
use crate::layout::Layout;
use crate::sem_kind::{Direction, Role, SemKind};
use crate::{Error, Result};

/// Every (direction, role) pair, in the order they are stored.
const ALL: [(Direction, Role); 4] = [
    (Direction::Request, Role::Produce),
    (Direction::Request, Role::Consume),
    (Direction::Response, Role::Produce),
    (Direction::Response, Role::Consume),
];

#[derive(Debug)]
pub(crate) enum SemSet {
    /// Four per worker, in `ALL` order.
    Named(Vec<NamedSemaphore>),
    /// At the layout's offsets in the response region.
    InRegion,
}

impl SemSet {
    /// The coordinator: creates (named) or initialises (in-region) every
    /// semaphore. Request produce starts at the depth (free ring frames),
    /// response produce at the depth too (each worker's free answer
    /// slots), consumes at 0.
    pub(crate) fn create(
        config: &ChannelConfig,
        layout: &Layout,
        response: &Region,
    ) -> Result<SemSet> {
        let initial = |direction, role| match (direction, role) {
            (Direction::Request, Role::Produce) => config.depth,
            (Direction::Response, Role::Produce) => config.depth,
            (_, Role::Consume) => 0,
        };
        match config.sems {
            SemKind::InRegion => {
                for rank in 0..config.workers {
                    for (direction, role) in ALL {
                        let sem: &ShmSemaphore = response
                            .view(layout.semaphore(direction, role, rank))
                            .map_err(|source| shm_error(config, source))?;
                        sem.init(initial(direction, role));
                    }
                }
                Ok(SemSet::InRegion)
            }
            SemKind::Named => {
                let mut sems = Vec::with_capacity(config.workers as usize * 4);
                for rank in 0..config.workers {
                    for (direction, role) in ALL {
                        let name = config.semaphore_name(direction, role, rank);
                        let sem = NamedSemaphore::create(&name, initial(direction, role))
                            .map_err(|source| sem_error(config, source))?;
                        sems.push(sem);
                    }
                }
                Ok(SemSet::Named(sems))
            }
        }
    }

    /// A worker: opens its own four (named), waiting up to the timeout.
    pub(crate) fn open(config: &ChannelConfig, rank: u32) -> Result<SemSet> {
        match config.sems {
            SemKind::InRegion => Ok(SemSet::InRegion),
            SemKind::Named => {
                // Placeholders keep the indexing uniform: only our own four are opened.
                let mut sems = Vec::with_capacity(4);
                for (direction, role) in ALL {
                    let name = config.semaphore_name(direction, role, rank);
                    sems.push(
                        NamedSemaphore::open_wait(&name, config.timeout)
                            .map_err(|source| sem_error(config, source))?,
                    );
                }
                Ok(SemSet::Named(sems))
            }
        }
    }

    /// The semaphore for `rank`. A worker's named set holds only its own
    /// four, so it asks with `own = true`.
    pub(crate) fn get<'a>(
        &'a self,
        response: &'a Region,
        layout: &Layout,
        direction: Direction,
        role: Role,
        rank: u32,
        own: bool,
    ) -> &'a (dyn Semaphore + Sync) {
        let index = ALL
            .iter()
            .position(|&p| p == (direction, role))
            .expect("every pair is listed");
        match self {
            SemSet::Named(sems) => {
                let base = if own { 0 } else { rank as usize * 4 };
                &sems[base + index]
            }
            SemSet::InRegion => response
                .view::<ShmSemaphore>(layout.semaphore(direction, role, rank))
                .expect("the response region was checked to hold every semaphore"),
        }
    }

    /// Removes the names (named semaphores); open handles keep working.
    pub(crate) fn unlink_names(&self) {
        if let SemSet::Named(sems) = self {
            for sem in sems {
                let _ = sem.unlink_now();
            }
        }
    }
}

fn shm_error(config: &ChannelConfig, source: nodeipc_shm::Error) -> Error {
    Error::Shm {
        channel: config.name.clone(),
        source,
    }
}

fn sem_error(config: &ChannelConfig, source: nodeipc_sem::Error) -> Error {
    Error::Sem {
        channel: config.name.clone(),
        source,
    }
}
