//! Duration mode (`-D`): perftest's alarm-driven states, driven here by deadlines read from
//! the [`crate::Clock`] on each loop turn. START (warm-up, `margin` s) → SAMPLE
//! (`duration − 2·margin` s, completions counted) → STOP_SAMPLE (`margin` s) → END.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationState {
    Start,
    Sample,
    StopSample,
    End,
}

#[derive(Debug, Clone)]
pub struct DurationFsm {
    pub state: DurationState,
    deadline: u64,
    sample_ns: u64,
    margin_ns: u64,
    /// perftest's `tposted[0]`: when SAMPLE began.
    pub t_start: u64,
    /// perftest's `tcompleted[0]`: when SAMPLE ended.
    pub t_end: u64,
}

const NS: u64 = 1_000_000_000;

impl DurationFsm {
    pub fn new(now: u64, secs: u32, margin: u32) -> Self {
        let margin_ns = u64::from(margin) * NS;
        let sample_ns = (u64::from(secs) - 2 * u64::from(margin)) * NS;
        let mut fsm = Self {
            state: DurationState::Start,
            deadline: now + margin_ns,
            sample_ns,
            margin_ns,
            t_start: 0,
            t_end: 0,
        };
        // perftest: with no margin, move to the next state at once.
        if margin == 0 {
            fsm.fire(now);
        }
        fsm
    }

    /// One alarm: the transition perftest's `catch_alarm` makes.
    fn fire(&mut self, now: u64) {
        match self.state {
            DurationState::Start => {
                self.state = DurationState::Sample;
                self.t_start = now;
                self.deadline = now + self.sample_ns;
            }
            DurationState::Sample => {
                self.state = DurationState::StopSample;
                self.t_end = now;
                // Unlike alarm(0), a zero margin still ends the run.
                self.deadline = now + self.margin_ns;
            }
            DurationState::StopSample => self.state = DurationState::End,
            DurationState::End => {}
        }
    }

    /// Applies every alarm due at `now`; returns the state afterwards.
    pub fn tick(&mut self, now: u64) -> DurationState {
        while self.state != DurationState::End && now >= self.deadline {
            self.fire(now);
        }
        self.state
    }
}
