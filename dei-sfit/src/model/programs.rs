//! The paper's programs and the cinema corpus as simulated programs (docs/corpus.md derives each count).
//!
//! Line numbers in stacks follow the paper's figures; for the cinema programs they are the lines of the real
//! services in `examples/` only nominally — what matters is which call sites are equal.

use super::Caller;
use crate::catalog::FaultCatalog;
use crate::source::Recorder;
use crate::test::{FunctionalTest, TestRun, Verdict, test_fn};
use dei_propagator::Fault;
use futures::future::BoxFuture;

/// A simulated program with its functional test and fault catalog.
#[derive(Clone, Copy)]
pub struct ModelProgram {
    /// Short name (`fig2`, `cinema-3`, …).
    pub name: &'static str,
    /// What it shows.
    pub about: &'static str,
    /// The entry service's signature pattern: the test's own request, never failed.
    pub entry: &'static str,
    /// The functional test body: issue the request from the root caller and judge the result.
    pub body: fn(Caller, TestRun) -> BoxFuture<'static, Verdict>,
}

impl ModelProgram {
    /// The paper's setting: one connection error per RPC, none on the test's own request to the entry service.
    pub fn catalog(&self) -> FaultCatalog {
        FaultCatalog::none()
            .with_rule(self.entry, vec![])
            .with_rule("*", vec![Fault::Connection])
    }

    /// The functional test, recording into `recorder`.
    pub fn test(&self, recorder: &Recorder) -> impl FunctionalTest + use<> {
        let rec = recorder.clone();
        let body = self.body;
        test_fn(self.name, move |run: TestRun| body(Caller::root(&run, &rec), run))
    }
}

/// Every program.
pub fn all() -> Vec<ModelProgram> {
    vec![FIG1, FIG2, FIG3, FIG4, FIG5, ENCAPSULATION, CINEMA3, CINEMA9, CINEMA10]
}

/// The program with this name.
pub fn by_name(name: &str) -> Option<ModelProgram> {
    all().into_iter().find(|p| p.name == name)
}

fn echo(s: String) -> impl FnOnce(Caller) -> futures::future::Ready<Result<String, Fault>> {
    move |_| futures::future::ready(Ok(s))
}

/// A callee that answers after yielding once, so that concurrent calls overlap as they do over a network.
fn echo_later(s: String) -> impl FnOnce(Caller) -> BoxFuture<'static, Result<String, Fault>> {
    move |_| {
        Box::pin(async move {
            tokio::task::yield_now().await;
            Ok(s)
        })
    }
}

/// Fig. 1: A calls B's `echo` from a helper at line 10, reached from lines 3 and 4; each call falls back to
/// its argument.
pub const FIG1: ModelProgram = ModelProgram {
    name: "fig1",
    about: "fallbacks: one helper, two call sites",
    entry: "A/helloworld",
    body: |t, run| {
        Box::pin(async move {
            let out = t
                .call("A/helloworld", "", &[], |a| async move {
                    let echo_via = |line: u32, s: &'static str| {
                        let a = a.clone();
                        async move {
                            a.call("B/echo", s, &[10, line], echo(s.into()))
                                .await
                                .unwrap_or(s.into())
                        }
                    };
                    let hello = echo_via(3, "Hello").await;
                    let world = echo_via(4, "World").await;
                    Ok(format!("{hello} {world}"))
                })
                .await;
            // the fallbacks make every execution return the same answer
            match out {
                Ok(s) if s == "Hello World" => Ok(()),
                other => Err(format!("fig1: got {other:?} under {}", run.plan())),
            }
        })
    },
};

/// Fig. 2: a loop of `echo` calls at line 8 that breaks on the first failure and calls `echo("Hello World")`
/// from line 16. Exactly the five executions of §3.2.
pub const FIG2: ModelProgram = ModelProgram {
    name: "fig2",
    about: "loops: count and stack are both needed",
    entry: "A/helloworld",
    body: |t, run| {
        Box::pin(async move {
            let out = t
                .call("A/helloworld", "Hello,World", &[], |a| async move {
                    let mut rs = Vec::new();
                    let mut failure = false;
                    for s in ["Hello", "World"] {
                        match a.call("B/echo", s, &[8], echo(s.into())).await {
                            Ok(r) => rs.push(r),
                            Err(_) => {
                                failure = true;
                                break;
                            }
                        }
                    }
                    if failure {
                        return a.call("B/echo", "Hello World", &[16], echo("Hello World".into())).await;
                    }
                    Ok(rs.join(" "))
                })
                .await;
            // conditional assertion: the fallback's own failure is the only way to fail
            match out {
                Ok(s) if s == "Hello World" => Ok(()),
                Err(_) if run.injected().await.map(|f| f.len()).unwrap_or(0) >= 2 => Ok(()),
                other => Err(format!("fig2: got {other:?}")),
            }
        })
    },
};

/// Fig. 3: the loop's calls run concurrently (line 7) and are awaited together; only the payload tells the
/// two apart deterministically.
pub const FIG3: ModelProgram = ModelProgram {
    name: "fig3",
    about: "async fan-out: payload is needed",
    entry: "A/helloworld",
    body: |t, _run| {
        Box::pin(async move {
            let out = t
                .call("A/helloworld", "Hello,World", &[], |a| async move {
                    let calls = ["Hello", "World"].map(|s| {
                        let a = a.clone();
                        async move {
                            // let the scheduler pick who issues first
                            if rand_bit() {
                                tokio::task::yield_now().await;
                            }
                            a.call("B/echo", s, &[7], echo_later(s.into())).await
                        }
                    });
                    let rs = futures::future::join_all(calls).await;
                    Ok(rs
                        .into_iter()
                        .map(|r| r.unwrap_or_default())
                        .collect::<Vec<_>>()
                        .join(" "))
                })
                .await;
            match out {
                Ok(_) => Ok(()),
                Err(e) => Err(format!("fig3: {e}")),
            }
        })
    },
};

/// Fig. 4: A loops over the strings calling B (line 9), records failures, then retries them (line 19); B
/// calls C (line 29) with a fallback. The path tells B's call to C under the retry from the one under the
/// loop.
pub const FIG4: ModelProgram = ModelProgram {
    name: "fig4",
    about: "path: e1 and e2 of §3.4",
    entry: "A/helloworld",
    body: |t, _run| {
        Box::pin(async move {
            let b_echo = |s: String| {
                move |b: Caller| async move {
                    Ok::<_, Fault>(b.call("C/echo", &s, &[29], echo(s.clone())).await.unwrap_or(s))
                }
            };
            let out = t
                .call("A/helloworld", "Hello,World", &[], |a| async move {
                    let mut rs: Vec<String> = Vec::new();
                    let mut failures = Vec::new();
                    for s in ["Hello", "World"] {
                        match a.call("B/echo", s, &[9], b_echo(s.into())).await {
                            Ok(r) => rs.push(r),
                            Err(_) => {
                                failures.push((rs.len(), s));
                                rs.push(String::new());
                            }
                        }
                    }
                    for (i, s) in failures {
                        if let Ok(r) = a.call("B/echo", s, &[19], b_echo(s.into())).await {
                            rs[i] = r;
                        }
                    }
                    Ok(rs.join(" "))
                })
                .await;
            out.map(|_| ()).map_err(|e| format!("fig4: {e}"))
        })
    },
};

/// Fig. 5: A opens a stream to B (line 3) and sends "Hello" and "World" concurrently (line 6).
pub const FIG5: ModelProgram = ModelProgram {
    name: "fig5",
    about: "streaming: preliminary indexes rewritten",
    entry: "A/index",
    body: |t, _run| {
        Box::pin(async move {
            let out = t
                .call("A/index", "", &[], |a| async move {
                    let rs = a
                        .stream(
                            "B/hello",
                            &[3],
                            &[6, 10],
                            &["Hello", "World"],
                            |_b, s| async move { Ok(s) },
                        )
                        .await?;
                    Ok(rs
                        .into_iter()
                        .map(|r| r.unwrap_or_default())
                        .collect::<Vec<_>>()
                        .join(" "))
                })
                .await;
            out.map(|_| ()).map_err(|e| format!("fig5: {e}"))
        })
    },
};

/// §2's example application: A calls B, C and D with default responses; B calls E with a default response.
/// Service-encapsulation reduction skips the plans that fail E together with C or D.
pub const ENCAPSULATION: ModelProgram = ModelProgram {
    name: "encapsulation",
    about: "§2 dynamic reduction: B encapsulates E",
    entry: "A/run",
    body: |t, _run| {
        Box::pin(async move {
            let out = t
                .call("A/run", "", &[], |a| async move {
                    let b = a
                        .call("B/run", "x", &[1], |b| async move {
                            // B's answer does not depend on whether E answered: E is encapsulated
                            let _ = b.call("E/run", "x", &[11], echo("e".into())).await;
                            Ok("b".to_string())
                        })
                        .await
                        .unwrap_or_else(|_| "default-b".into());
                    let c = a
                        .call("C/run", "x", &[2], echo("c".into()))
                        .await
                        .unwrap_or_else(|_| "default-c".into());
                    let d = a
                        .call("D/run", "x", &[3], echo("d".into()))
                        .await
                        .unwrap_or_else(|_| "default-d".into());
                    Ok(format!("{b}{c}{d}"))
                })
                .await;
            out.map(|_| ()).map_err(|e| format!("encapsulation: {e}"))
        })
    },
};

const USER: &str = "chris";
const MOVIE: &str = "m-267";
const SHOWTIME: &str = "s-9";

/// The movie service: details of one movie.
fn movies_get(movie: &'static str) -> impl FnOnce(Caller) -> futures::future::Ready<Result<String, Fault>> {
    echo(format!("details({movie})"))
}

/// cinema-3: users calls bookings in a retry loop of two attempts (the same line); bookings calls movies and
/// fails when movies fails. 7 = 1 + 2 x 3 executions.
pub const CINEMA3: ModelProgram = ModelProgram {
    name: "cinema-3",
    about: "invocation count: retry loop over a chain",
    entry: "cinema.Users/*",
    body: |t, run| {
        Box::pin(async move {
            let out = t
                .call("cinema.Users/GetBookings", USER, &[], |users| async move {
                    for _attempt in 0..2 {
                        let got = users
                            .call("cinema.Bookings/Get", USER, &[40], |bookings| async move {
                                let details = bookings
                                    .call("cinema.Movies/Get", MOVIE, &[60], movies_get(MOVIE))
                                    .await
                                    .map_err(|_| Fault::INTERNAL)?;
                                Ok(vec![details])
                            })
                            .await;
                        if let Ok(list) = got {
                            return Ok(list);
                        }
                    }
                    Err(Fault::UNAVAILABLE)
                })
                .await;
            judge_bookings(out, &run, 2).await
        })
    },
};

/// cinema-9: users fetches bookings through a helper (line 30) called from line 20; on failure it marks the
/// request failed and retries later through the same helper from line 24; with bookings it calls movies
/// (line 50). 5 executions.
pub const CINEMA9: ModelProgram = ModelProgram {
    name: "cinema-9",
    about: "call stack: one helper, two call sites",
    entry: "cinema.Users/*",
    body: |t, run| {
        Box::pin(async move {
            let out = t
                .call("cinema.Users/GetBookings", USER, &[], |users| async move {
                    let helper = |site: u32| {
                        let users = users.clone();
                        async move {
                            users
                                .call("cinema.Bookings/Get", USER, &[30, site], echo(MOVIE.to_string()))
                                .await
                        }
                    };
                    let mut booking = helper(20).await.ok();
                    if booking.is_none() {
                        // the failed request is retried later, from the other call site
                        booking = helper(24).await.ok();
                    }
                    let Some(movie) = booking else {
                        return Err(Fault::UNAVAILABLE);
                    };
                    let details = users.call("cinema.Movies/Get", &movie, &[50], movies_get(MOVIE)).await;
                    Ok(vec![details.unwrap_or_else(|_| "details(unavailable)".into())])
                })
                .await;
            judge_bookings(out, &run, 2).await
        })
    },
};

/// cinema-10: users calls bookings, which calls movies (line 60) and fails when movies fails; on a bookings
/// failure users falls back to its default booking list and calls movies directly (line 44) with the same
/// payload, defaulting the details if that fails too; with a complete booking users also fetches its
/// showtime (line 46). 6 executions.
pub const CINEMA10: ModelProgram = ModelProgram {
    name: "cinema-10",
    about: "path: bookings->movies vs users->movies",
    entry: "cinema.Users/*",
    body: |t, run| {
        Box::pin(async move {
            let out = t
                .call("cinema.Users/GetBookings", USER, &[], |users| async move {
                    let got = users
                        .call("cinema.Bookings/Get", USER, &[40], |bookings| async move {
                            let details = bookings
                                .call("cinema.Movies/Get", MOVIE, &[60], movies_get(MOVIE))
                                .await
                                .map_err(|_| Fault::INTERNAL)?;
                            Ok((details, SHOWTIME))
                        })
                        .await;
                    match got {
                        Ok((details, showtime)) => {
                            let when = users
                                .call("cinema.Showtimes/Get", showtime, &[46], echo("20:00".into()))
                                .await
                                .unwrap_or_else(|_| "unknown".into());
                            Ok(vec![format!("{details} at {when}")])
                        }
                        Err(_) => {
                            // default booking list: the movie is known, the showtime is not
                            let details = users
                                .call("cinema.Movies/Get", MOVIE, &[44], movies_get(MOVIE))
                                .await
                                .unwrap_or_else(|_| "details(unavailable)".into());
                            Ok(vec![details])
                        }
                    }
                })
                .await;
            judge_bookings(out, &run, 1).await
        })
    },
};

/// The cinema test: the user's bookings come back with movie details, unless faults were injected; under
/// faults (conditional assertion) an error is accepted only when at least `min_faults_for_error` were.
async fn judge_bookings(out: Result<Vec<String>, Fault>, run: &TestRun, min_faults_for_error: usize) -> Verdict {
    let injected = run.injected().await.map(|v| v.len()).unwrap_or(0);
    match out {
        Ok(list) if list.len() == 1 && list[0].starts_with(&format!("details({MOVIE})")) => Ok(()),
        Ok(list) if injected > 0 => {
            if list.len() == 1 {
                Ok(())
            } else {
                Err(format!("expected one booking, got {list:?}"))
            }
        }
        Err(e) if injected >= min_faults_for_error => {
            let _ = e;
            Ok(())
        }
        other => Err(format!("bookings of {USER}: {other:?} with {injected} faults injected")),
    }
}

fn rand_bit() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    let x = STATE.fetch_add(nanos | 1, Ordering::Relaxed);
    (x ^ (x >> 29) ^ nanos) & 1 == 1
}
