//! Reflective memory across processes: groups of 2 to 8 node processes, checksummed writes
//! from several writers seen by every member in order, joins and leaves while writing, a
//! member killed, four groups at once and a fifth refused, receiver lists, DMA to a group.

mod support;

use std::time::{Duration, Instant};

use lanes::{
    DmaDirection, Error, Fabric, FabricConfig, GroupEvent, LossReason, MapAccess, NodeId, ReflectiveMember, Timeout,
};
use support::records::{follow, write_record, GROUP_BYTES};
use support::{pattern, ChildIo, Proc, Topology};

const T: Timeout = Timeout::After(Duration::from_secs(10));

fn event_line(e: lanes::Result<GroupEvent>) -> String {
    match e {
        Ok(GroupEvent::Joined { node, .. }) => format!("joined {node}"),
        Ok(GroupEvent::Left { node, died, .. }) => format!("left {node} died={died}"),
        Ok(GroupEvent::Lost(r)) => format!("lost {r:?}"),
        Err(e) => format!("error {}", support::variant_name(&e)),
    }
}

/// The `member` role: joins group `LANES_TEST_GROUP`, then obeys one command per line.
fn member(io: &ChildIo) {
    let group: u32 = std::env::var("LANES_TEST_GROUP").unwrap().parse().unwrap();
    let fabric = Fabric::open().unwrap();
    let m: ReflectiveMember = match fabric.join_reflective_group(group, T) {
        Ok(m) => m,
        Err(e) => {
            io.send(&format!("ERR {}", support::variant_name(&e)));
            return;
        }
    };
    io.send("JOINED");
    while let Some(line) = io.recv() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let reply = match w[0] {
            "write" => {
                let (k, count): (usize, u64) = (w[1].parse().unwrap(), w[2].parse().unwrap());
                for n in 0..count {
                    write_record(m.write_map(), k, n).unwrap();
                }
                "OK".to_string()
            }
            "follow" => {
                let (k, last): (usize, u64) = (w[1].parse().unwrap(), w[2].parse().unwrap());
                match follow(m.read_map(), k, last, Duration::from_secs(20)) {
                    Ok(n) => format!("OK {n}"),
                    Err(e) => format!("FAIL {e}"),
                }
            }
            "sum" => {
                let (off, len): (usize, usize) = (w[1].parse().unwrap(), w[2].parse().unwrap());
                let mut v = vec![0u8; len];
                m.read_map().read_bytes(off, &mut v).unwrap();
                format!("{:016x}", support::fnv64(&v))
            }
            "event" => event_line(m.wait_event(Timeout::After(Duration::from_millis(w[1].parse().unwrap())))),
            "readonly" => match m.read_map().write::<u64>(0, 1) {
                Err(Error::ReadOnly) => "OK".into(),
                other => format!("FAIL {other:?}"),
            },
            "exit" => break,
            other => format!("FAIL unknown {other}"),
        };
        io.send(&reply);
    }
}

/// The `creator` role: creates group `LANES_TEST_GROUP`, then answers `sum` until told to exit.
fn creator(io: &ChildIo) {
    let group: u32 = std::env::var("LANES_TEST_GROUP").unwrap().parse().unwrap();
    let fabric = Fabric::open().unwrap();
    let g = fabric.create_reflective_group(group, GROUP_BYTES, &[]).unwrap();
    io.send("CREATED");
    while let Some(line) = io.recv() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w[0] != "sum" {
            break;
        }
        let (off, len): (usize, usize) = (w[1].parse().unwrap(), w[2].parse().unwrap());
        let mut v = vec![0u8; len];
        g.read_map().read_bytes(off, &mut v).unwrap();
        io.send(&format!("{:016x}", support::fnv64(&v)));
    }
}

#[test]
fn child_entry() {
    support::child_entry(|role, io| {
        match role {
            "member" => member(io),
            "creator" => creator(io),
            _ => return false,
        }
        true
    });
}

fn spawn_member(t: &Topology, node: u32, group: u32) -> Proc {
    let fabric = t.fabric(node);
    let mut p = Proc::spawn_in(
        &t.prefix(node),
        &format!("member {node}"),
        "member",
        &[
            ("LANES_DIR", fabric.to_str().unwrap()),
            ("LANES_NODE_ID", &node.to_string()),
            ("LANES_TEST_GROUP", &group.to_string()),
        ],
    );
    let l = p.line("JOINED");
    assert_eq!(l, "JOINED", "member {node}");
    p
}

fn me(t: &Topology, node: u32) -> Fabric {
    Fabric::open_with(FabricConfig::new(t.fabric(node), NodeId::new(node).unwrap())).unwrap()
}

fn every_member_of_groups_of_2_to_8_sees_every_writers_records_whole_and_in_order(t: &Topology) {
    for n in [2usize, 5, 8] {
        let t = &t.fresh(&format!("refl-{n}"));
        let creator = me(t, 4);
        let g = creator.create_reflective_group(7, GROUP_BYTES, &[]).unwrap();
        let mut members: Vec<Proc> = (1..n as u32).map(|i| spawn_member(t, 4 + 4 * i, 7)).collect();
        assert_eq!(g.members().len(), n - 1);
        // Writer 0 is the creator (a thread of this process); in groups larger than two,
        // member 0 writes too, as writer 1. Every member follows every writer but itself.
        let writers = if n > 2 { 2 } else { 1 };
        let count = 3000u64;
        for (i, m) in members.iter_mut().enumerate() {
            for k in 0..writers {
                if !(k == 1 && i == 0) {
                    m.send(&format!("follow {k} {}", count - 1));
                }
            }
        }
        if writers == 2 {
            members[0].send(&format!("write 1 {count}"));
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                for r in 0..count {
                    write_record(g.write_map(), 0, r).unwrap();
                }
            });
            if writers == 2 {
                follow(g.read_map(), 1, count - 1, Duration::from_secs(30)).unwrap();
            }
        });
        for (i, m) in members.iter_mut().enumerate() {
            let expected = if i == 0 { writers - usize::from(writers == 2) } else { writers };
            for _ in 0..expected {
                let r = m.line("a follow result");
                assert!(r.starts_with("OK"), "group of {n}: {r}");
            }
        }
        if writers == 2 {
            assert_eq!(members[0].line("write done"), "OK");
        }
        // The read map really is read-only.
        members[0].send("readonly");
        assert_eq!(members[0].line("readonly"), "OK");
        for m in members.iter_mut() {
            m.send("exit");
        }
    }
}

fn members_hear_joins_leaves_deaths_and_the_groups_loss(t: &Topology) {
    let creator = me(t, 4);
    let g = creator.create_reflective_group(9, GROUP_BYTES, &[]).unwrap();
    let mut a = spawn_member(t, 8, 9);
    assert_eq!(event_line(g.wait_event(T)), "joined 8");
    let mut b = spawn_member(t, 12, 9);
    assert_eq!(event_line(g.wait_event(T)), "joined 12");
    a.send("event 5000");
    assert_eq!(a.line("event"), "joined 12", "a member hears another join");
    // Writing while a third member joins: it sees the latest record.
    a.send("write 0 500");
    let mut c = spawn_member(t, 16, 9);
    assert_eq!(a.line("write"), "OK");
    c.send("follow 0 499");
    assert!(c.line("follow").starts_with("OK"));
    // b leaves normally, c is killed: the others hear both.
    b.send("exit");
    let killed = Instant::now();
    c.kill9();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        seen.push(event_line(g.wait_event(T)));
    }
    println!("creator saw {seen:?}, the kill after {:?}", killed.elapsed());
    assert!(seen.contains(&"joined 16".to_string()), "{seen:?}");
    assert!(seen.contains(&"left 12 died=false".to_string()), "{seen:?}");
    assert!(seen.contains(&"left 16 died=true".to_string()), "{seen:?}");
    let mut heard = Vec::new();
    while heard.len() < 3 {
        a.send("event 5000");
        heard.push(a.line("event"));
    }
    assert!(heard.contains(&"left 16 died=true".to_string()), "{heard:?}");
    // The creator dies: the member hears the loss.
    drop(g);
    a.send("event 5000");
    assert_eq!(a.line("event"), "lost Removed");
    a.send("exit");
}

fn four_groups_at_once_a_fifth_refused_and_receiver_lists(t: &Topology) {
    let f = me(t, 4);
    let groups: Vec<_> = (1..=4).map(|i| f.create_reflective_group(i, 4096, &[]).unwrap()).collect();
    assert!(matches!(f.create_reflective_group(5, 4096, &[]), Err(Error::TooManyGroups { max: 4 })));
    let other = me(t, 8);
    assert!(matches!(other.create_reflective_group(5, 4096, &[]), Err(Error::TooManyGroups { max: 4 })));
    groups[3].remove().unwrap();
    assert!(matches!(other.create_reflective_group(1, 4096, &[]), Err(Error::GroupInUse { group: 1, node: 4 })));
    let g5 = other.create_reflective_group(5, 4096, &[12, 16]).unwrap();
    // Only the chosen receivers join.
    let mut c = Proc::spawn_in(
        &t.prefix(20),
        "non-receiver",
        "member",
        &[("LANES_DIR", t.fabric(20).to_str().unwrap()), ("LANES_NODE_ID", "20"), ("LANES_TEST_GROUP", "5")],
    );
    assert_eq!(c.line("refusal"), "ERR NotAReceiver");
    let mut r = spawn_member(t, 16, 5);
    r.send("exit");
    assert!(matches!(f.join_reflective_group(77, Timeout::Immediate), Err(Error::NoSuchGroup { group: 77 })));
    assert!(matches!(
        f.join_reflective_group(77, Timeout::After(Duration::from_millis(50))),
        Err(Error::Timeout { .. })
    ));
    drop(g5);
}

fn dma_writes_reach_every_member_and_a_killed_creator_is_a_loss(t: &Topology) {
    let mut creator = Proc::spawn_in(
        &t.prefix(8),
        "creator",
        "creator",
        &[("LANES_DIR", t.fabric(8).to_str().unwrap()), ("LANES_NODE_ID", "8"), ("LANES_TEST_GROUP", "3")],
    );
    assert_eq!(creator.line("CREATED"), "CREATED");
    let mut reader = spawn_member(t, 12, 3);
    let f = me(t, 16);
    let w = f.join_reflective_group(3, T).unwrap();
    assert_eq!(w.creator_node(), 8);
    // DMA from a local segment of node 16 into the group.
    let src = f.create_segment(0x77, 64 << 10).unwrap();
    let data = pattern(0xFEED, 0, 64 << 10);
    src.map(0, 64 << 10, MapAccess::ReadWrite).unwrap().write_bytes(0, &data).unwrap();
    let mut q = f.create_dma_queue(8).unwrap();
    q.start(&src, w.segment(), 0, 60_000, 1000, DmaDirection::Write, None).unwrap();
    q.wait(T).unwrap();
    let want = format!("{:016x}", support::fnv64(&data[..60_000]));
    reader.send("sum 1000 60000");
    assert_eq!(reader.line("sum"), want, "a DMA write reaches another member");
    creator.send("sum 1000 60000");
    assert_eq!(creator.line("sum"), want, "and the creator");
    // The creator is killed: the members hear the loss, as the last event.
    let mut seen = Vec::new();
    let killed = Instant::now();
    creator.kill9();
    loop {
        match w.wait_event(T) {
            Ok(GroupEvent::Lost(r)) => {
                assert_eq!(r, LossReason::OwnerDied);
                break;
            }
            Ok(e) => seen.push(e),
            Err(e) => panic!("{e} after {seen:?}"),
        }
    }
    assert!(killed.elapsed() < Duration::from_secs(2), "noticed after {:?}", killed.elapsed());
    println!("the creator's death was noticed after {:?}", killed.elapsed());
    assert!(w.wait_event(Timeout::Immediate).is_err(), "the loss is the last event");
    // The reader may hear node 16's join first: its own death watch can fire after ours.
    let mut heard = Vec::new();
    let last = loop {
        reader.send("event 5000");
        let l = reader.line("event");
        if l.starts_with("lost") || l.starts_with("error") || heard.len() == 4 {
            break l;
        }
        heard.push(l);
    };
    assert_eq!(last, "lost OwnerDied", "after {heard:?}");
    assert!(heard.iter().all(|e| e == "joined 16"), "{heard:?}");
    reader.send("exit");
}

/// Every receiver "creates" the group, as SISCI programs written for reflective hardware do
/// (a broadcast segment with the group's id on each receiver): the first creates it, the
/// others join; a writer that only joins reaches them all; a joiner larger than the group
/// is refused; receivers racing to create make one group; the first receiver's own copy is
/// writable and (on one host) shared.
fn several_receivers_create_one_group_and_a_writer_reaches_them_all(t: &Topology) {
    use lanes::GroupReceiver;
    let (f4, f8, f12, f16) = (me(t, 4), me(t, 8), me(t, 12), me(t, 16));
    let r1 = f4.receive_reflective_group(11, 8192).unwrap();
    assert!(matches!(r1, GroupReceiver::Created(_)), "the first receiver creates: {r1:?}");
    let r2 = f8.receive_reflective_group(11, 4096).unwrap();
    assert!(matches!(r2, GroupReceiver::Joined(_)), "the next joins: {r2:?}");
    assert_eq!((r2.id(), r2.size()), (11, 8192));
    assert!(matches!(f12.receive_reflective_group(11, 16384), Err(Error::InvalidSize { .. })));
    let w = f16.join_reflective_group(11, T).unwrap();
    w.write_map().write_bytes(100, b"to every receiver").unwrap();
    w.write_map().flush();
    for (name, r) in [("creator", &r1), ("joiner", &r2)] {
        let m = r.local_map(0, 8192, MapAccess::ReadOnly).unwrap();
        let mut got = [0u8; 17];
        m.read_bytes(100, &mut got).unwrap();
        assert_eq!(&got, b"to every receiver", "{name}");
    }
    // A receiver's own copy is writable; on one host the receivers share it.
    let own = r2.local_map(4096, 64, MapAccess::ReadWrite).unwrap();
    own.write::<u64>(0, 0x1234).unwrap();
    assert_eq!(r1.local_map(4096, 8, MapAccess::ReadOnly).unwrap().read::<u64>(0).unwrap(), 0x1234);
    assert!(matches!(r2.local_map(8190, 4, MapAccess::ReadOnly), Err(Error::OutOfRange { .. })));
    // The joiner leaving does not end the group; the creator's removal does.
    drop(r2);
    w.write_map().write::<u64>(8, 7).unwrap();
    w.write_map().flush();
    assert_eq!(r1.local_map(0, 16, MapAccess::ReadOnly).unwrap().read::<u64>(8).unwrap(), 7);
    drop(r1);
    assert!(matches!(w.wait_event(T), Ok(GroupEvent::Lost(_)) | Ok(GroupEvent::Left { .. })));
    drop(w);
    // Receivers racing for one id make one group.
    let fabrics: Vec<Fabric> = [20, 24, 28, 32].iter().map(|&n| me(t, n)).collect();
    let got: Vec<GroupReceiver> = std::thread::scope(|s| {
        let hs: Vec<_> = fabrics.iter().map(|f| s.spawn(move || f.receive_reflective_group(12, 4096))).collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    });
    let created = got.iter().filter(|r| matches!(r, GroupReceiver::Created(_))).count();
    assert_eq!(created, 1, "{got:?}");
}

support::topology_cases!(
    several_receivers_create_one_group_and_a_writer_reaches_them_all,
    every_member_of_groups_of_2_to_8_sees_every_writers_records_whole_and_in_order,
    members_hear_joins_leaves_deaths_and_the_groups_loss,
    four_groups_at_once_a_fifth_refused_and_receiver_lists,
    dma_writes_reach_every_member_and_a_killed_creator_is_a_loss,
);
