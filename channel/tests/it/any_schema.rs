//! A channel of a stack's own messages: the coordinator and workers generic
//! over any prost messages, aggregation as a rule the stack chooses, and
//! the MindIE gather (wait for all, answer rank 0's).

use std::thread;
use std::time::Duration;

use nodeipc_channel::{
    Aggregated, AggregatedBy, All, Channel, ChannelBuilder, Error, Rank0AfterAll, Raw, Worker,
};
use nodeipc_testkit::{Watchdog, shm_leftovers, unique_name};

/// A serving stack's request: not ours.
#[derive(Clone, PartialEq, prost::Message)]
struct Prompt {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(string, tag = "2")]
    text: String,
}

/// And its response.
#[derive(Clone, PartialEq, prost::Message)]
struct Tokens {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint32, tag = "2")]
    rank: u32,
    #[prost(uint32, repeated, tag = "3")]
    ids: Vec<u32>,
}

fn workers(channel: &ChannelBuilder<Prompt, Tokens>, rounds: u64) -> Vec<thread::JoinHandle<()>> {
    (0..channel.config().workers)
        .map(|rank| {
            let channel = channel.clone();
            thread::spawn(move || {
                let mut worker = channel.join(rank).unwrap();
                for _ in 0..rounds {
                    let prompt = worker.recv().unwrap();
                    let ids = prompt.text.bytes().map(|b| u32::from(b) + rank).collect();
                    worker
                        .respond(&Tokens {
                            id: prompt.id,
                            rank,
                            ids,
                        })
                        .unwrap();
                }
            })
        })
        .collect()
}

#[test]
fn a_channel_of_a_stacks_own_messages_round_trips_and_aggregates_by_its_rule() {
    let _dog = Watchdog::new("any_schema", Duration::from_secs(60));
    let name = unique_name("schema");
    let channel = Channel::builder(&name)
        .workers(3)
        .timeout(Duration::from_secs(10))
        .typed::<Prompt, Tokens>();
    let mut coordinator = channel.create().unwrap();
    let handles = workers(&channel, 4);
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();

    // Every worker's answer, decoded as the stack's type.
    coordinator
        .send(&Prompt {
            id: 1,
            text: "ab".into(),
        })
        .unwrap();
    let all = coordinator.recv(All).unwrap();
    for (rank, tokens) in all.iter().enumerate() {
        assert_eq!((tokens.id, tokens.rank), (1, rank as u32));
        assert_eq!(tokens.ids, [97 + rank as u32, 98 + rank as u32]);
    }

    // No rule set for these messages: refused before anything is gathered.
    coordinator
        .send(&Prompt {
            id: 2,
            text: "c".into(),
        })
        .unwrap();
    let err = coordinator.recv(Aggregated).unwrap_err();
    assert!(err.to_string().contains("set_aggregate"), "{err}");
    // The stack's rule: the highest rank's answer.
    coordinator.set_aggregate(|all: Vec<Tokens>| {
        Ok(all
            .into_iter()
            .max_by_key(|t| t.rank)
            .expect("one per worker"))
    });
    let folded = coordinator.recv(Aggregated).unwrap();
    assert_eq!((folded.id, folded.rank), (2, 2));

    // A rule given for one call.
    coordinator
        .send(&Prompt {
            id: 3,
            text: "d".into(),
        })
        .unwrap();
    let mut total_ids = |all: Vec<Tokens>| -> nodeipc_channel::Result<Tokens> {
        Ok(Tokens {
            id: all[0].id,
            rank: u32::MAX,
            ids: all.iter().flat_map(|t| t.ids.iter().copied()).collect(),
        })
    };
    let summed = coordinator.recv(AggregatedBy(&mut total_ids)).unwrap();
    assert_eq!(summed.ids, [100, 101, 102]);

    // MindIE's gather: every worker answers, rank 0's is returned.
    coordinator
        .send(&Prompt {
            id: 4,
            text: "e".into(),
        })
        .unwrap();
    let first = coordinator.recv(Rank0AfterAll).unwrap();
    assert_eq!((first.id, first.rank), (4, 0));
    assert!(matches!(
        coordinator.recv(All),
        Err(Error::NothingOutstanding { .. })
    ));
    for h in handles {
        h.join().unwrap();
    }
    drop(coordinator);
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn a_response_that_is_not_the_stacks_message_is_a_decode_error_naming_the_rank() {
    let _dog = Watchdog::new("any_schema_decode", Duration::from_secs(60));
    let channel = Channel::builder(unique_name("schema-bad"))
        .workers(2)
        .timeout(Duration::from_secs(10))
        .typed::<Prompt, Tokens>();
    let coordinator = channel.create().unwrap();
    let handles: Vec<_> = (0..2u32)
        .map(|rank| {
            let config = channel.config().clone();
            let channel = channel.clone();
            thread::spawn(move || {
                if rank == 1 {
                    // A worker of the same channel answering raw bytes:
                    // field 3 with wire type 7, no protobuf message at all.
                    let mut worker = Worker::<Raw, Raw>::join(config, rank).unwrap();
                    worker.recv().unwrap();
                    worker.respond(&[0x1f, 0xff]).unwrap();
                } else {
                    let mut worker = channel.join(rank).unwrap();
                    let prompt = worker.recv().unwrap();
                    worker
                        .respond(&Tokens {
                            id: prompt.id,
                            rank,
                            ids: vec![],
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    coordinator
        .wait_for_workers(Duration::from_secs(10))
        .unwrap();
    coordinator
        .send(&Prompt {
            id: 9,
            text: String::new(),
        })
        .unwrap();
    let err = coordinator.recv(All).unwrap_err();
    assert!(matches!(err, Error::Decode { rank: 1, .. }), "{err}");
    // Both slots were consumed: the channel is in step.
    assert!(matches!(
        coordinator.recv(All),
        Err(Error::NothingOutstanding { .. })
    ));
    for h in handles {
        h.join().unwrap();
    }
}
