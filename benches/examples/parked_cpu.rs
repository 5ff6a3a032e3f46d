//! Prints the CPU time a rank uses while parked 1 s in a barrier.
fn main() {
    nodeipc_cli::bench::run_if_peer();
    let cpu = nodeipc_cli::bench::barrier::parked_cpu(std::time::Duration::from_secs(1))
        .expect("parked_cpu");
    println!("CPU time while parked 1 s in a barrier: {cpu:?}");
}
