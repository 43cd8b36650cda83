//! The kernel thread team: fork/join of a few tasks with the launching thread
//! taking part, and workers that spin briefly before sleeping.
//!
//! Why not `rayon::broadcast` for this: from a thread outside rayon's pool it
//! queues the tasks for the pool and puts the caller to sleep on a condition
//! variable, and idle pool threads sleep within microseconds. Every split kernel
//! then paid for waking two pool threads and, at the end, the caller: on these
//! virtual machines about 25-30 us per call, so a 65536-element `add_` took 36 us
//! where the serial loop takes 10, and a [32, 128] x [128, 512] GEMM 50 us where
//! the `gemm` crate alone needs 24. OpenMP, which CPU PyTorch uses, avoids both
//! costs: the master thread runs part 0 itself and the other threads spin-wait
//! between parallel regions (libgomp spins for up to `GOMP_SPINCOUNT` polls before
//! sleeping). This team does the same.
//!
//! Shape: `threads - 1` workers (`threads` = rayon's pool size, so the split sizes
//! kernels compute from `rayon::current_num_threads()` still match). Task 0 runs on
//! the launching thread, task `t >= 1` on worker `t`, the same worker on every
//! call, as OpenMP's static schedule does: a kernel that splits a tensor the same
//! way every time finds its part in the same core's caches. A worker spins for
//! [`SPIN`] after its last task, then parks until it is given another.
//!
//! A task belongs to whichever thread claims it first: its worker when it sees the
//! launch, or the launcher once it has finished task 0 and finds the task still
//! unclaimed. Why: on these virtual machines a parked worker (or one whose virtual
//! CPU the host has descheduled) can take a millisecond or more to wake; in such
//! phases every split kernel of a digits-CNN training step waited for that wake-up
//! (steps of 7-20 ms instead of 3.3, with 8-13 worker sleeps per step). The launcher
//! now runs the late worker's task itself and returns without waiting for it.
//!
//! No two threads of a launch share a CPU when another is free. Measured on these
//! 2-vCPU machines: after a block of CPU PyTorch work and a pause, the scheduler
//! sometimes left the launcher and worker 1 on one vCPU for milliseconds to seconds
//! while the other idled; 40 MB reductions and a 512 GEMM then took 2-2.8x as long
//! (each side's spinning took the CPU from the other). So a worker that finds
//! itself on the launcher's CPU (`sched_getcpu`) moves off it (narrowing its
//! affinity mask for a moment) and, if it still shares it, sleeps instead of
//! spinning after its task; a launcher that shares a CPU with a running task sleeps
//! instead of spinning too.
//!
//! Narrow launches. On a device whose kernels run on stream workers, the host
//! thread keeps a core busy with Python while the kernels it queued run. A launch
//! that used every core then would put three threads on two cores, and the host's
//! own work (data preparation, logging) would slow by as much as the kernels gain.
//! So a launcher may ask for a narrow launch ([`set_narrow_policy`]; the extension
//! asks for it on stream workers while no host thread waits for the device): it
//! gives no tasks to the workers and runs them all itself, but stays open to
//! helpers. A host thread that starts waiting for the device calls [`help`] and
//! takes the tasks not claimed yet, so the kernel running when the host stops
//! gets the host's core; launches that start while a host waits are wide again.
//!
//! One launch runs at a time: a thread that launches while another thread's launch
//! runs waits for it (both would compete for the same cores anyway). A launch with
//! more tasks than the team has threads is refused and the caller uses rayon
//! instead. A task that launches again (a nested split) is refused too and runs its
//! sub-tasks serially: every thread of the team already has a task. No thread
//! waits for the launch lock while holding it, so launches cannot deadlock.

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::hint::spin_loop;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// How long an idle worker (or a launcher waiting for its workers) polls before
/// sleeping. Long enough to bridge the gap between two kernels of a training step
/// launched from Python (a few to tens of microseconds), short enough that a worker
/// left idle gives its core back within a fraction of a millisecond.
pub const SPIN: Duration = Duration::from_micros(500);

/// Polls between two reads of the clock while spinning.
const POLLS_PER_CLOCK_READ: u32 = 64;

/// The type-erased task function of the current launch. Its lifetime is the
/// launch's: [`run`] does not return before every worker is done with it.
type Job = *const (dyn Fn(usize) + Sync + 'static);

struct Worker {
    /// Number of the last launch this worker was given a task in (0: none yet).
    ticket: AtomicU64,
    /// Number of the last launch whose task for this worker was claimed, by the
    /// worker or by the launcher (see [`claim`]).
    claimed: AtomicU64,
    /// Set while the worker sleeps (or is about to), so a launcher knows to unpark it.
    parked: AtomicBool,
    /// The CPU this worker ran its last task on (`NO_CPU`: unknown).
    cpu: AtomicUsize,
    thread: OnceLock<Thread>,
}

struct Team {
    /// Launch serialisation; holds the number of the last launch.
    launch: Mutex<u64>,
    /// Written by the launcher (holding `launch`) before it publishes tickets,
    /// read by workers after they see their ticket change.
    job: UnsafeCell<Option<Job>>,
    /// Tasks of the current launch other than task 0 that have not finished, on
    /// their workers or on the launcher (see [`claim`]).
    pending: AtomicUsize,
    /// The first panic of a task other than task 0 in the current launch.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Set while the launcher sleeps waiting for `pending` to reach 0.
    launcher_parked: AtomicBool,
    launcher: Mutex<Option<Thread>>,
    /// The CPU the current launch's launcher started on (`NO_CPU`: unknown).
    launcher_cpu: AtomicUsize,
    /// Worker `t` (task `t`) is `workers[t - 1]`.
    workers: Box<[Worker]>,
}

// SAFETY: `job` is written only by the thread holding `launch`, before the
// Release store of the tickets that hand it to workers, and read by a worker
// only after the Acquire load of its ticket and before its `pending` decrement,
// which the next writer waits for.
unsafe impl Sync for Team {}

thread_local! {
    /// True on team workers, and on a launcher while it runs task 0.
    static IN_TEAM: Cell<bool> = const { Cell::new(false) };
}

static TEAM: OnceLock<Option<&'static Team>> = OnceLock::new();

/// Whether the calling thread's next launch is narrow (see the module documentation).
static NARROW_POLICY: OnceLock<fn() -> bool> = OnceLock::new();

/// The narrow launch running now, while it has tasks to hand out; its counters live
/// on the launcher's stack until [`HELPERS`] is back to 0 after it was closed.
#[derive(Clone, Copy)]
struct Open {
    job: Job,
    tasks: usize,
    /// The next unclaimed task.
    next: *const AtomicUsize,
    /// Tasks other than task 0 that have not finished.
    unfinished: *const AtomicUsize,
}

// SAFETY: the pointers address the launcher's counters and job, which outlive
// every helper that copied them: a helper registers in `HELPERS` under `OPEN`'s
// lock, and the launcher closes `OPEN` and waits for `HELPERS` to be 0 before
// its stack frame ends.
unsafe impl Send for Open {}

static OPEN: Mutex<Option<Open>> = Mutex::new(None);
/// Helpers working on the open (or just closed) narrow launch.
static HELPERS: AtomicUsize = AtomicUsize::new(0);

/// Installs the rule deciding whether a launch is narrow (once per process; later
/// calls are ignored). Without one, every launch uses the whole team.
pub fn set_narrow_policy(policy: fn() -> bool) {
    let _ = NARROW_POLICY.set(policy);
}
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn mark_forked_child() {
    // The workers do not exist in a forked child; a launch there must not wait for them.
    FORKED.store(true, Relaxed);
}

/// The team, started on first use; `None` when there is only one thread.
fn team() -> Option<&'static Team> {
    *TEAM.get_or_init(|| {
        let threads = rayon::current_num_threads();
        if threads < 2 {
            return None;
        }
        let workers = (1..threads)
            .map(|_| Worker {
                ticket: AtomicU64::new(0),
                claimed: AtomicU64::new(0),
                parked: AtomicBool::new(false),
                cpu: AtomicUsize::new(NO_CPU),
                thread: OnceLock::new(),
            })
            .collect();
        let team: &'static Team = Box::leak(Box::new(Team {
            launch: Mutex::new(0),
            job: UnsafeCell::new(None),
            pending: AtomicUsize::new(0),
            panic: Mutex::new(None),
            launcher_parked: AtomicBool::new(false),
            launcher: Mutex::new(None),
            launcher_cpu: AtomicUsize::new(NO_CPU),
            workers,
        }));
        for t in 1..threads {
            let spawned = thread::Builder::new().name(format!("oxide-team-{t}")).spawn(move || work(team, t));
            match spawned {
                Ok(handle) => {
                    let _ = team.workers[t - 1].thread.set(handle.thread().clone());
                }
                // No team without all its workers (a launch would wait for the missing one).
                Err(_) => return None,
            }
        }
        // SAFETY: registers a plain function that stores to an atomic.
        unsafe { libc_atfork(mark_forked_child) };
        Some(team)
    })
}

/// The CPU the calling thread runs on, or `NO_CPU` when the system cannot tell.
fn current_cpu() -> usize {
    extern "C" {
        fn sched_getcpu() -> i32;
    }
    // SAFETY: no arguments; returns -1 on failure.
    usize::try_from(unsafe { sched_getcpu() }).unwrap_or(NO_CPU)
}

/// glibc's `cpu_set_t`: 1024 CPUs in 16 words.
type CpuMask = [u64; 16];

extern "C" {
    fn sched_getaffinity(pid: i32, size: usize, mask: *mut u64) -> i32;
    fn sched_setaffinity(pid: i32, size: usize, mask: *const u64) -> i32;
}

/// The calling thread's affinity mask, or `None` when the system cannot tell.
fn affinity() -> Option<CpuMask> {
    let mut mask: CpuMask = [0; 16];
    // SAFETY: `mask` is `size_of::<CpuMask>()` writable bytes; pid 0 is the calling thread.
    (unsafe { sched_getaffinity(0, std::mem::size_of::<CpuMask>(), mask.as_mut_ptr()) } == 0).then_some(mask)
}

/// Moves the calling thread off CPU `cpu` if its affinity mask allows another one:
/// narrows the mask to exclude `cpu` (the kernel migrates the thread at once), then
/// puts the mask back as it was, which leaves the thread where it now is. Does
/// nothing when the mask cannot be read or holds no other CPU.
fn move_off(cpu: usize) {
    let Some(mask) = affinity() else { return };
    if cpu >= mask.len() * 64 {
        return;
    }
    let mut others = mask;
    others[cpu / 64] &= !(1u64 << (cpu % 64));
    if others.iter().all(|&w| w == 0) {
        return;
    }
    let size = std::mem::size_of::<CpuMask>();
    // SAFETY: both masks are `size` readable bytes; pid 0 is the calling thread.
    unsafe {
        if sched_setaffinity(0, size, others.as_ptr()) == 0 {
            sched_setaffinity(0, size, mask.as_ptr());
        }
    }
}

/// [`current_cpu`]'s "unknown".
const NO_CPU: usize = usize::MAX;

/// `pthread_atfork(NULL, NULL, child)`, declared here to avoid a `libc` dependency for one call.
unsafe fn libc_atfork(child: extern "C" fn()) {
    extern "C" {
        fn pthread_atfork(
            prepare: Option<extern "C" fn()>,
            parent: Option<extern "C" fn()>,
            child: Option<extern "C" fn()>,
        ) -> i32;
    }
    // SAFETY: forwarded.
    unsafe { pthread_atfork(None, None, Some(child)) };
}

/// Number of threads a launch can use (launcher included); 1 without a team.
pub fn size() -> usize {
    team().map_or(1, |t| t.workers.len() + 1)
}

thread_local! {
    /// The running launch's thread count (0: none set), see [`with_launch_threads`].
    static LAUNCH_THREADS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Runs `f` as a launch that may use `threads` threads: PyTorch's
/// `at::get_num_threads()` when the operator was called, which the ABI sets for
/// every kernel it runs, so that kernels splitting by [`launch_threads`] (GEMM,
/// copies) honour `torch.set_num_threads` as the kernels handed a thread count do.
pub fn with_launch_threads<R>(threads: usize, f: impl FnOnce() -> R) -> R {
    let previous = LAUNCH_THREADS.with(|c| c.replace(threads));
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            LAUNCH_THREADS.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(previous);
    f()
}

/// Threads the running launch may use: its thread count (see
/// [`with_launch_threads`]), at most rayon's; rayon's outside a launch.
pub fn launch_threads() -> usize {
    let all = rayon::current_num_threads();
    match LAUNCH_THREADS.with(|c| c.get()) {
        0 => all,
        n => n.min(all),
    }
}

/// True on a team worker, or on a launcher while it runs its own task.
pub fn in_team() -> bool {
    IN_TEAM.with(|c| c.get())
}

/// Spins until `done()` or [`SPIN`] has passed; returns whether `done()` held.
#[inline]
fn spin_until(done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..POLLS_PER_CLOCK_READ {
            if done() {
                return true;
            }
            spin_loop();
        }
        if start.elapsed() >= SPIN {
            return done();
        }
    }
}

fn work(team: &'static Team, t: usize) {
    IN_TEAM.with(|c| c.set(true));
    let me = &team.workers[t - 1];
    let mut seen = 0u64;
    // Whether to sleep at once instead of spinning (see `crowded` below).
    let mut crowded = false;
    loop {
        if crowded || !spin_until(|| me.ticket.load(Acquire) != seen) {
            me.parked.store(true, SeqCst);
            while me.ticket.load(SeqCst) == seen {
                thread::park();
            }
            me.parked.store(false, Relaxed);
        }
        seen = me.ticket.load(Acquire);
        if !claim(me, seen) {
            // The launcher ran this task itself; the launch may be over already.
            continue;
        }
        let mut cpu = current_cpu();
        if cpu != NO_CPU && cpu == team.launcher_cpu.load(Relaxed) {
            // Sharing the launcher's CPU, the two tasks would take turns on it.
            move_off(cpu);
            cpu = current_cpu();
        }
        me.cpu.store(cpu, Relaxed);
        // SAFETY: see `impl Sync for Team`; the job outlives this task (the
        // launcher waits for `pending` to reach 0 before returning).
        let job = unsafe { (*team.job.get()).expect("a ticket is published with its job") };
        run_task(team, job, t);
        // A worker that shares its CPU with the launcher sleeps at once rather
        // than spin: spinning there only takes the CPU from the launcher. Measured cause: after PyTorch's own
        // OpenMP threads had run, the scheduler sometimes left this worker and
        // the launcher on one of the two virtual CPUs for seconds while the other
        // idled, and 40 MB reductions took 2-3x as long (each side spinning on
        // the other's CPU). A worker woken from sleep is placed on an idle CPU.
        crowded = cpu != NO_CPU && cpu == team.launcher_cpu.load(Relaxed);
        if team.pending.fetch_sub(1, SeqCst) == 1 && team.launcher_parked.load(SeqCst) {
            if let Some(l) = team.launcher.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                l.unpark();
            }
        }
    }
}

/// Claims worker `w`'s task of launch `ticket` for the calling thread; false when it
/// was claimed already (by the launcher, or by the worker). Exactly one claim of a
/// launch's task succeeds: `claimed` only grows, and only from below `ticket`.
fn claim(w: &Worker, ticket: u64) -> bool {
    let mut c = w.claimed.load(SeqCst);
    while c < ticket {
        match w.claimed.compare_exchange_weak(c, ticket, SeqCst, SeqCst) {
            Ok(_) => return true,
            Err(now) => c = now,
        }
    }
    false
}

/// Runs task `t` of `job`, keeping the first panic of the launch for the launcher.
fn run_task(team: &Team, job: Job, t: usize) {
    // SAFETY: the caller claimed task `t` of the current launch, whose job outlives it.
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| unsafe { (*job)(t) })) {
        team.panic.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(payload);
    }
}

/// Runs `f(t)` for every `t` in `0..tasks` on the team, `f(0)` on the calling
/// thread (and, after it, each task its worker has not claimed yet), and returns
/// `true` once all have finished. Returns `false` without
/// running anything when the team cannot take the launch: more tasks than
/// [`size`], no team, a call from inside a task (a nested launch), or a forked
/// child. A launch from another thread that is running is waited for. A panic in any task is resumed on the
/// caller after all tasks have finished.
pub fn run(tasks: usize, f: &(dyn Fn(usize) + Sync)) -> bool {
    if tasks < 2 || in_team() || FORKED.load(Relaxed) {
        return false;
    }
    let Some(team) = team() else { return false };
    if tasks > team.workers.len() + 1 {
        return false;
    }
    let mut launch = team.launch.lock().unwrap_or_else(|e| e.into_inner());
    if NARROW_POLICY.get().is_some_and(|narrow| narrow()) {
        run_narrow(team, tasks, f);
        drop(launch);
        return true;
    }
    *launch += 1;
    let ticket = *launch;
    // SAFETY: erases `f`'s lifetime; it is used only until `pending` reaches 0 below.
    let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f) };
    // SAFETY: we hold `launch`, and every worker of the previous launch has finished.
    unsafe { *team.job.get() = Some(job) };
    team.pending.store(tasks - 1, SeqCst);
    let here = current_cpu();
    team.launcher_cpu.store(here, Relaxed);
    for w in &team.workers[..tasks - 1] {
        w.ticket.store(ticket, SeqCst);
        if w.parked.load(SeqCst) {
            if let Some(th) = w.thread.get() {
                th.unpark();
            }
        }
    }
    IN_TEAM.with(|c| c.set(true));
    let own = catch_unwind(AssertUnwindSafe(|| f(0)));
    // Tasks whose workers have not started them yet run here, in order.
    for (i, w) in team.workers[..tasks - 1].iter().enumerate() {
        if claim(w, ticket) {
            run_task(team, job, i + 1);
            team.pending.fetch_sub(1, SeqCst);
        }
    }
    IN_TEAM.with(|c| c.set(false));
    // Spinning on a CPU that a worker still running its task shares would slow it.
    let crowded = here != NO_CPU && team.workers[..tasks - 1].iter().any(|w| w.cpu.load(Relaxed) == here);
    if team.pending.load(Acquire) != 0 && (crowded || !spin_until(|| team.pending.load(Acquire) == 0)) {
        *team.launcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread::current());
        team.launcher_parked.store(true, SeqCst);
        while team.pending.load(SeqCst) != 0 {
            thread::park();
        }
        team.launcher_parked.store(false, SeqCst);
    }
    // SAFETY: every worker is done with the job.
    unsafe { *team.job.get() = None };
    let worker_panic = team.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(launch);
    if let Err(payload) = own {
        resume_unwind(payload);
    }
    if let Some(payload) = worker_panic {
        resume_unwind(payload);
    }
    true
}

/// A launch the calling thread runs alone unless a host thread helps (the caller
/// holds the team's launch lock). Panics as in [`run`].
fn run_narrow(team: &Team, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
    let next = AtomicUsize::new(1);
    let unfinished = AtomicUsize::new(tasks - 1);
    // SAFETY: erases `f`'s lifetime; helpers use it only until `HELPERS` is 0 below.
    let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f) };
    *OPEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(Open { job, tasks, next: &next, unfinished: &unfinished });
    IN_TEAM.with(|c| c.set(true));
    let own = catch_unwind(AssertUnwindSafe(|| f(0)));
    run_open_tasks(team, job, tasks, &next, &unfinished);
    IN_TEAM.with(|c| c.set(false));
    *OPEN.lock().unwrap_or_else(|e| e.into_inner()) = None;
    // Every task is claimed; a helper may still run one (or be about to find none left).
    while HELPERS.load(SeqCst) != 0 || unfinished.load(SeqCst) != 0 {
        thread::yield_now();
    }
    let helper_panic = team.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Err(payload) = own {
        resume_unwind(payload);
    }
    if let Some(payload) = helper_panic {
        resume_unwind(payload);
    }
}

/// Claims and runs tasks of an open launch until none is left.
fn run_open_tasks(team: &Team, job: Job, tasks: usize, next: &AtomicUsize, unfinished: &AtomicUsize) {
    loop {
        let t = next.fetch_add(1, SeqCst);
        if t >= tasks {
            break;
        }
        run_task(team, job, t);
        unfinished.fetch_sub(1, SeqCst);
    }
}

/// Runs tasks of the narrow launch running now, if there is one with tasks left,
/// on the calling thread: what a host thread does before it sleeps waiting for the
/// device (see the module documentation). Returns at once otherwise.
pub fn help() {
    if in_team() || FORKED.load(Relaxed) {
        return;
    }
    let Some(team) = TEAM.get().copied().flatten() else { return };
    let open = {
        let guard = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        let Some(open) = *guard else { return };
        HELPERS.fetch_add(1, SeqCst);
        open
    };
    IN_TEAM.with(|c| c.set(true));
    // SAFETY: registered in `HELPERS` while the launch was open, so its counters live on.
    run_open_tasks(team, open.job, open.tasks, unsafe { &*open.next }, unsafe { &*open.unfinished });
    IN_TEAM.with(|c| c.set(false));
    HELPERS.fetch_sub(1, SeqCst);
}

/// Whether the calling thread shares its CPU with a team worker that has a task of
/// the launch running now (the CPU its last task ran on). A host thread waiting for
/// the device asks this at each poll and sleeps instead when it is true: polling
/// there takes the CPU from the kernel it waits for (`benchmarks/placement.py`;
/// figures in ARCHITECTURE.md).
pub fn crowding_a_worker() -> bool {
    let Some(team) = TEAM.get().copied().flatten() else { return false };
    if team.pending.load(Acquire) == 0 {
        return false;
    }
    let here = current_cpu();
    here != NO_CPU && team.workers.iter().any(|w| w.cpu.load(Relaxed) == here)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// The team's size, or `None` (test skipped, with the reason printed) on a one-thread pool.
    fn team_size() -> Option<usize> {
        let n = size();
        if n < 2 {
            eprintln!("skipped: the team needs at least two threads (rayon pool of {n})");
        }
        (n >= 2).then_some(n)
    }

    thread_local! {
        static NARROW_HERE: Cell<bool> = const { Cell::new(false) };
    }

    /// The narrow policy of these tests: only threads that asked for it launch narrow.
    fn narrow_here() -> bool {
        NARROW_HERE.with(|c| c.get())
    }

    #[test]
    fn a_narrow_launch_runs_on_its_launcher_and_takes_a_helper() {
        let Some(n) = team_size() else { return };
        set_narrow_policy(narrow_here);
        NARROW_HERE.with(|c| c.set(true));
        let me = thread::current().id();
        let ran = Mutex::new(Vec::new());
        assert!(run(n, &|t| ran.lock().unwrap().push((t, thread::current().id()))));
        let mut ran = ran.into_inner().unwrap();
        ran.sort_by_key(|r| r.0);
        assert_eq!(
            ran,
            (0..n).map(|t| (t, me)).collect::<Vec<_>>(),
            "without a helper every task runs on the launcher"
        );

        // Task 0 holds the launcher until another thread has run task 1: only a helper can.
        let started = AtomicBool::new(false);
        let helped = Mutex::new(None);
        thread::scope(|s| {
            s.spawn(|| {
                while !started.load(SeqCst) {
                    spin_loop();
                }
                help();
            });
            assert!(run(n, &|t| {
                if t == 0 {
                    started.store(true, SeqCst);
                    let deadline = Instant::now() + Duration::from_secs(20);
                    while helped.lock().unwrap().is_none() && Instant::now() < deadline {
                        thread::yield_now();
                    }
                } else if t == 1 {
                    *helped.lock().unwrap() = Some(thread::current().id());
                }
            }));
        });
        let helper = helped.into_inner().unwrap().expect("task 1 ran");
        assert_ne!(helper, me, "the helper ran task 1");
        NARROW_HERE.with(|c| c.set(false));
        help(); // no open launch: returns at once
    }

    fn assert_every_task_runs_once(n: usize) {
        let count = AtomicUsize::new(0);
        assert!(run(n, &|_| {
            count.fetch_add(1, SeqCst);
        }));
        assert_eq!(count.load(SeqCst), n);
    }

    #[test]
    fn every_task_runs_once_on_its_own_thread_and_nested_launches_run_serially() {
        let Some(n) = team_size() else { return };
        let names = Mutex::new(vec![String::new(); n]);
        for _ in 0..3 {
            let count = AtomicUsize::new(0);
            let nested = AtomicUsize::new(0);
            assert!(run(n, &|t| {
                count.fetch_add(1, SeqCst);
                names.lock().unwrap()[t] = thread::current().name().unwrap_or("").to_string();
                assert!(in_team());
                // A nested launch is refused (the caller then loops serially).
                assert!(!run(2, &|_| {}));
                nested.fetch_add(1, SeqCst);
            }));
            assert_eq!(count.load(SeqCst), n);
            assert_eq!(nested.load(SeqCst), n);
        }
        let names = names.into_inner().unwrap();
        let launcher = thread::current().name().unwrap_or("").to_string();
        for (t, name) in names.iter().enumerate().skip(1) {
            // A task runs on its own worker, or on the launcher when the worker was late.
            assert!(name == &format!("oxide-team-{t}") || name == &launcher, "task {t} ran on {name}");
        }
        assert!(!in_team());
        assert!(!run(n + 1, &|_| {}), "more tasks than threads must be refused");
        // Workers that have gone to sleep are woken.
        thread::sleep(SPIN * 4);
        assert_every_task_runs_once(n);
    }

    #[test]
    fn a_worker_running_a_task_crowds_its_cpu_only_during_the_launch() {
        let Some(n) = team_size() else { return };
        if current_cpu() == NO_CPU {
            eprintln!("skipped: sched_getcpu cannot tell this thread's CPU");
            return;
        }
        // On the worker itself, just after it recorded the CPU it runs on; a migration
        // between the two reads is possible but rare, so one of a few launches suffices.
        let seen = AtomicUsize::new(0);
        for _ in 0..50 {
            assert!(run(n, &|t| {
                if t == n - 1 && crowding_a_worker() {
                    seen.fetch_add(1, SeqCst);
                }
            }));
            if seen.load(SeqCst) > 0 {
                break;
            }
        }
        assert!(seen.load(SeqCst) > 0, "a worker's own CPU never counted as crowded");
        // Holding the launch lock, no launch runs: nobody is crowded, whatever the CPU.
        let team = team().expect("team_size found a team");
        let _no_launch = team.launch.lock().unwrap_or_else(|e| e.into_inner());
        assert!(!crowding_a_worker());
    }

    #[test]
    fn move_off_leaves_the_cpu_and_restores_the_affinity_mask() {
        let before = affinity().expect("sched_getaffinity works on Linux");
        let allowed: u32 = before.iter().map(|w| w.count_ones()).sum();
        let cpu = current_cpu();
        if allowed < 2 || cpu == NO_CPU {
            eprintln!("skipped: this thread may run on {allowed} CPU(s) and sched_getcpu gave {cpu}; moving needs two");
            return;
        }
        move_off(cpu);
        assert_ne!(current_cpu(), cpu, "the thread left CPU {cpu}");
        assert_eq!(affinity(), Some(before), "the affinity mask is as it was");
        // A CPU outside the mask is a no-op, not an error.
        move_off(usize::MAX);
        assert_eq!(affinity(), Some(before));
    }

    #[test]
    fn a_launch_task_is_claimed_exactly_once() {
        let w = Worker {
            ticket: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            parked: AtomicBool::new(false),
            cpu: AtomicUsize::new(NO_CPU),
            thread: OnceLock::new(),
        };
        assert!(claim(&w, 1), "the first claim of launch 1 wins");
        assert!(!claim(&w, 1), "a second claim of launch 1 loses");
        assert!(claim(&w, 3), "a later launch can be claimed");
        assert!(!claim(&w, 2), "a stale ticket (a worker that slept through launch 2) loses");
        // Two threads racing through the same launches: no launch is won twice.
        let wins: Vec<AtomicUsize> = (0..20_000).map(|_| AtomicUsize::new(0)).collect();
        thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for ticket in 4..20_000u64 {
                        if claim(&w, ticket) {
                            wins[ticket as usize].fetch_add(1, SeqCst);
                        }
                    }
                });
            }
        });
        assert!(wins.iter().all(|n| n.load(SeqCst) <= 1), "a launch's task was claimed twice");
        assert_eq!(wins[19_999].load(SeqCst), 1);
    }

    #[test]
    fn tasks_of_sleeping_workers_still_run_exactly_once() {
        let Some(n) = team_size() else { return };
        for _ in 0..20 {
            // Let the workers park, so the launcher usually finds their tasks unclaimed.
            thread::sleep(SPIN * 2);
            let runs: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            assert!(run(n, &|t| {
                runs[t].fetch_add(1, SeqCst);
            }));
            assert!(runs.iter().all(|r| r.load(SeqCst) == 1));
        }
    }

    #[test]
    fn a_panicking_task_reaches_the_launcher_after_all_tasks_finish_and_the_team_stays_usable() {
        let Some(n) = team_size() else { return };
        for bad in [0, n - 1] {
            let finished = AtomicUsize::new(0);
            let r = catch_unwind(AssertUnwindSafe(|| {
                run(n, &|t| {
                    if t == bad {
                        panic!("task {t} fails");
                    }
                    thread::sleep(Duration::from_millis(2));
                    finished.fetch_add(1, SeqCst);
                })
            }));
            let msg = r.expect_err("the panic is resumed").downcast::<String>().map(|s| *s).unwrap_or_default();
            assert_eq!(msg, format!("task {bad} fails"));
            assert_eq!(finished.load(SeqCst), n - 1, "the other tasks ran to the end before the panic was resumed");
        }
        assert_every_task_runs_once(n);
    }

    #[test]
    fn concurrent_launchers_take_turns_on_the_team() {
        let Some(n) = team_size() else { return };
        let active = AtomicUsize::new(0);
        let ran = AtomicUsize::new(0);
        thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..500 {
                        assert!(run(n, &|_| {
                            let before = active.fetch_add(1, SeqCst);
                            assert!(before < n, "two launches shared the team");
                            spin_loop();
                            active.fetch_sub(1, SeqCst);
                            ran.fetch_add(1, SeqCst);
                        }));
                    }
                });
            }
        });
        assert_eq!(ran.load(SeqCst), 1500 * n, "every launch waited for its turn and ran all its tasks");
    }
}
