//! The barrier's vault, written by another process.

use std::time::Duration;

use nodeipc_barrier::{Group, GroupOptions, TransportChoice};
use nodeipc_shm::Region;

use super::{Script, fresh_name, our_start_time};

/// Where the vault keeps what the driver fixes up (`barrier/src/vault.rs`;
/// `fuzz_props::the_vault_offsets_the_drivers_use_are_the_real_ones` keeps
/// these honest).
pub mod vault_layout {
    /// The magic, [`MAGIC_VALUE`].
    pub const MAGIC: usize = 0;
    /// The layout version (`u32`).
    pub const VERSION: usize = 8;
    /// The world size (`u32`).
    pub const WORLD: usize = 12;
    /// The slot size (`u32`).
    pub const SLOT: usize = 16;
    /// Set once rank 0 has written the header (`u32`).
    pub const INIT: usize = 20;
    /// How many ranks joined (`u32`).
    pub const JOINED: usize = 24;
    /// Set when a rank poisoned the group (`u32`).
    pub const POISON: usize = 28;
    /// The rank table: 32 bytes a rank, start time (`u64`), pid, flags.
    pub const RANKS: usize = 768;
    /// Bytes of one rank table entry.
    pub const RANK_ENTRY: usize = 32;
    /// What [`MAGIC`] holds.
    pub const MAGIC_VALUE: &[u8; 8] = b"NIPCVLT1";
    /// Bytes of a vault for `world` ranks with `slot`-byte slots.
    pub fn size(world: usize, slot: usize) -> usize {
        let data_at = (RANKS + world * RANK_ENTRY).next_multiple_of(64);
        let stride = 8 + slot.next_multiple_of(8);
        (data_at + 2 * world * stride).next_multiple_of(64) + 2 * world * 32
    }
}

/// What a joiner may name when it refuses a vault.
const VAULT_FIELDS: &[&str] = &["layout version", "world size", "slot size", "vault size"];

/// A joiner meets a vault some other process (us) wrote: the bytes fill the
/// region, then flag bits put back the fields a real rank 0 would have
/// written (so the fuzzer reaches past each check), and a live rank table
/// (our own pid) lets the join go through to the collectives, whose slot
/// lengths and descriptor handles are the fuzzer's too.
pub fn vault(data: &[u8]) {
    use vault_layout as v;
    let mut script = Script::new(data);
    let fix = script.u16();
    let world = 2 + (script.byte() % 3) as usize;
    let slot = 1 + script.byte() as usize;
    let rank = 1 + (script.byte() as usize % (world - 1));
    let right_size = v::size(world, slot);
    let size = match script.byte() {
        0..=191 => right_size,
        n => (right_size + 64).saturating_sub(n as usize).max(1),
    };
    let name = fresh_name("fuzz-vault");
    let region = Region::create(&name, size).expect("create the vault");
    let content = script.rest();
    if !content.is_empty() {
        let mut filled = vec![0u8; size];
        for (i, b) in filled.iter_mut().enumerate() {
            *b = content[i % content.len()];
        }
        region.write_at(0, &filled).expect("fill");
    }
    let put = |at: usize, bytes: &[u8]| {
        if at + bytes.len() <= size {
            region.write_at(at, bytes).expect("fix up");
        }
    };
    let bit = |n: u32| fix & (1 << n) != 0;
    if bit(0) {
        put(v::MAGIC, v::MAGIC_VALUE);
    }
    if bit(1) {
        put(v::VERSION, &1u32.to_le_bytes());
    }
    if bit(2) {
        put(v::WORLD, &(world as u32).to_le_bytes());
    }
    if bit(3) {
        put(v::SLOT, &(slot as u32).to_le_bytes());
    }
    if !bit(4) {
        put(v::INIT, &1u32.to_le_bytes());
    }
    if bit(5) {
        // Every other rank registered, as this live process.
        for r in (0..world).filter(|&r| r != rank) {
            let at = v::RANKS + r * v::RANK_ENTRY;
            put(at, &our_start_time().to_le_bytes());
            put(at + 8, &std::process::id().to_le_bytes());
            put(at + 12, &1u32.to_le_bytes());
        }
    }
    if bit(6) {
        put(v::JOINED, &(world as u32 - 1).to_le_bytes());
    }
    if bit(7) {
        put(v::POISON, &0u32.to_le_bytes());
    }
    if bit(8) {
        // Our own entry free, so the join does not see a rank joined twice.
        put(v::RANKS + rank * v::RANK_ENTRY + 12, &0u32.to_le_bytes());
    }
    let options = GroupOptions::new(&name, rank as u32, world as u32)
        .slot_size(slot)
        .timeout(Duration::from_millis(3))
        .transport(TransportChoice::Pidfd);
    match Group::join(options) {
        Ok(mut group) => {
            let t = Duration::from_millis(3);
            check_group_error(&name, group.all_gather_timeout(b"mine", t).err());
            check_group_error(&name, group.broadcast_timeout(0, b"", t).err());
            let memfd = Region::anonymous(64).expect("memfd");
            check_group_error(&name, group.exchange_fds_timeout(memfd.as_fd(), t).err());
            check_group_error(&name, group.barrier_timeout(t).err());
        }
        Err(e) => check_group_error(&name, Some(e)),
    }
    drop(region);
}

fn check_group_error(name: &str, error: Option<nodeipc_barrier::Error>) {
    use nodeipc_barrier::Error as E;
    let Some(error) = error else { return };
    let text = error.to_string();
    assert!(
        text.contains(name),
        "an error that does not name the group: {text}"
    );
    match &error {
        E::Mismatch {
            what, ours, theirs, ..
        } => {
            assert!(
                VAULT_FIELDS.contains(what),
                "a mismatch naming no field: {text}"
            );
            assert_ne!(ours, theirs, "{text}");
        }
        E::NotAVault { magic, .. } => assert_ne!(magic.to_le_bytes(), *vault_layout::MAGIC_VALUE),
        E::Corrupt { len, slot_size, .. } => assert!(*len > *slot_size as u64, "{text}"),
        E::TooLarge { len, slot_size, .. } => assert!(len > slot_size, "{text}"),
        E::Timeout { .. }
        | E::PeerDied { .. }
        | E::PeerLeft { .. }
        | E::Poisoned { .. }
        | E::InvalidOptions { .. }
        | E::Transport { .. }
        | E::Protocol { .. }
        | E::FdPass { .. }
        | E::Shm { .. }
        | E::RankOutOfRange { .. } => {}
        other => panic!("unexpected error: {other}"),
    }
}
