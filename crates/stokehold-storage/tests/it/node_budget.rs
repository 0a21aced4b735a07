//! One memory budget shared by four processes on the node: grants never add up to more than the
//! budget, and a process that dies returns its share (issue #55, item 3).
//!
//! The processes are this test binary run again with `STOKEHOLD_TEST_BUDGET_CHILD` set: the test
//! then plays one holder (reserve, report the grant in a file, hold until told to go or killed).

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use stokehold_storage::node_budget::NodeBudget;

const CHILD: &str = "STOKEHOLD_TEST_BUDGET_CHILD";
const TOTAL: u64 = 1000;

fn wait_for(path: &Path) -> String {
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s.trim().to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{} never came",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn holder(dir: &Path, i: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "node_budget::four_processes_share_one_node_budget",
            "--nocapture",
        ])
        .env(CHILD, format!("{}:{i}", dir.display()))
        .spawn()
        .unwrap()
}

#[test]
fn four_processes_share_one_node_budget() {
    if let Ok(spec) = std::env::var(CHILD) {
        // one holder: 400 bytes wanted, any amount accepted
        let (dir, i) = spec.rsplit_once(':').unwrap();
        let dir = Path::new(dir);
        let budget = NodeBudget::open(dir.join("budget"), TOTAL).unwrap();
        let lease = budget.reserve(400, 1).unwrap();
        let said = lease
            .as_ref()
            .map_or("none".to_string(), |l| l.bytes().to_string());
        std::fs::write(dir.join(format!("granted-{i}")), format!("{said}\n")).unwrap();
        wait_for(&dir.join("go"));
        drop(lease);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut children = Vec::new();
    let mut grants = Vec::new();
    for i in 0..4 {
        children.push(holder(tmp.path(), i));
        grants.push(wait_for(&tmp.path().join(format!("granted-{i}"))));
    }
    // one after another: 400, 400, what is left, nothing
    assert_eq!(grants, ["400", "400", "200", "none"]);
    let budget = NodeBudget::open(tmp.path().join("budget"), TOTAL).unwrap();
    assert_eq!(budget.used().unwrap(), TOTAL);
    assert!(budget.reserve(1, 1).unwrap().is_none());
    // a holder killed (no clean exit): its 400 come back at the next reservation
    children[1].kill().unwrap();
    children[1].wait().unwrap();
    let lease = budget
        .reserve(1000, 1)
        .unwrap()
        .expect("the dead holder's share");
    assert_eq!(lease.bytes(), 400);
    assert_eq!(budget.used().unwrap(), TOTAL);
    // the others leave cleanly
    std::fs::write(tmp.path().join("go"), "go\n").unwrap();
    for (i, c) in children.iter_mut().enumerate() {
        if i != 1 {
            assert!(c.wait().unwrap().success());
        }
    }
    assert_eq!(budget.used().unwrap(), 400);
    drop(lease);
    assert_eq!(budget.used().unwrap(), 0);
}
