//! Round trips through two MPMC rings between four processes, every pop a
//! timed one: the shape of `versus-shaq`'s `mpmc-rt-2x2` row. Two clients
//! (this process and a child) push requests that two servers (children)
//! pop and answer into a second ring, which the clients pop (any answer
//! will do). Every request is answered, so no timed pop may time out and
//! every answer is whole. `NODEIPC_RT_ROUNDS` sets the rounds per client
//! (30 000 by default; millions to hunt a rare stall).

use std::time::Duration;

use nodeipc_queue::{Error, MpmcConsumer, MpmcProducer, MpmcQueue};
use nodeipc_testkit::{
    ChildGuard, Watchdog, shm_leftovers, spawn_child, this_test_in_a_child, unique_name,
};

type Msg = [u64; 8];
const SCHEMA: u64 = 0x7274_7432; // "rtt2"
const CHILD: &str = "NODEIPC_MPMC_ROUND_TRIP_CHILD";
const WAIT: Duration = Duration::from_secs(20);
const STOP: Msg = [u64::MAX; 8];

fn rounds() -> u64 {
    std::env::var("NODEIPC_RT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000)
}

fn msg(source: u64, i: u64) -> Msg {
    std::array::from_fn(|k| (source << 56 | i).wrapping_add(k as u64))
}

fn reply(m: &Msg) -> Msg {
    std::array::from_fn(|k| !m[k])
}

fn assert_whole(m: &Msg) {
    let want: Msg = std::array::from_fn(|k| m[0].wrapping_add(k as u64));
    assert_eq!(m, &want, "a torn message");
}

/// A client's part: `rounds` requests, each followed by a timed pop of
/// whichever answer comes.
fn client(source: u64, tx: &mut MpmcProducer<Msg>, rx: &mut MpmcConsumer<Msg>) {
    for i in 0..rounds() {
        tx.push_timeout(&msg(source, i), WAIT)
            .unwrap_or_else(|e| panic!("client {source}, request {i}: {e}"));
        let answer = rx.pop_timeout(WAIT).unwrap_or_else(|e| {
            panic!(
                "client {source}, answer {i}: {e} (something at the head: {})",
                rx.has_data()
            )
        });
        assert_whole(&reply(&answer));
    }
}

/// A child's part: `server PING PONG` or `client PING PONG`.
#[test]
fn child_main() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let (role, ping, pong) = (parts[0], parts[1], parts[2]);
    let t = Duration::from_secs(10);
    match role {
        "server" => {
            let mut rx = MpmcConsumer::<Msg>::open(ping, SCHEMA, t).unwrap();
            let mut tx = MpmcProducer::<Msg>::open(pong, SCHEMA, t).unwrap();
            loop {
                let m = match rx.pop_timeout(WAIT) {
                    Err(Error::TimedOut { .. }) => continue,
                    other => other.unwrap_or_else(|e| panic!("server: {e}")),
                };
                if m == STOP {
                    return;
                }
                assert_whole(&m);
                tx.push_timeout(&reply(&m), WAIT)
                    .unwrap_or_else(|e| panic!("server: {e}"));
            }
        }
        "client" => {
            let mut tx = MpmcProducer::<Msg>::open(ping, SCHEMA, t).unwrap();
            let mut rx = MpmcConsumer::<Msg>::open(pong, SCHEMA, t).unwrap();
            client(1, &mut tx, &mut rx);
        }
        other => panic!("unknown child role {other}"),
    }
}

fn spawn(role: &str, ping: &str, pong: &str) -> ChildGuard {
    let mut command =
        this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), "child_main"));
    command.env(CHILD, format!("{role} {ping} {pong}"));
    spawn_child(&mut command)
}

#[test]
fn two_clients_and_two_servers_never_wait_out_an_answer() {
    let _watchdog = Watchdog::new(
        "two_clients_and_two_servers_never_wait_out_an_answer",
        Duration::from_secs(300),
    );
    let (ping_name, pong_name) = (unique_name("rt-ping"), unique_name("rt-pong"));
    let ping = MpmcQueue::<Msg>::create(&ping_name, 1024, 2, 2, SCHEMA).unwrap();
    let pong = MpmcQueue::<Msg>::create(&pong_name, 1024, 2, 2, SCHEMA).unwrap();
    let servers: Vec<ChildGuard> = (0..2)
        .map(|_| spawn("server", &ping_name, &pong_name))
        .collect();
    let other_client = spawn("client", &ping_name, &pong_name);
    let mut tx = ping.producer().unwrap();
    let mut rx = pong.consumer().unwrap();
    client(0, &mut tx, &mut rx);
    other_client.output_success(Duration::from_secs(120));
    for _ in 0..2 {
        tx.push_timeout(&STOP, WAIT).unwrap();
    }
    for server in servers {
        server.output_success(Duration::from_secs(60));
    }
    drop((tx, rx, ping, pong));
    assert!(shm_leftovers(&ping_name).is_empty() && shm_leftovers(&pong_name).is_empty());
}
