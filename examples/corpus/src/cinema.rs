//! The cinema application (users, bookings, movies, showtimes) as real tonic services on loopback, in the
//! three shapes of the paper's Table 1. docs/corpus.md fixes the details and derives each count.

use crate::pb::cinema::bookings_client::BookingsClient;
use crate::pb::cinema::bookings_server::{Bookings, BookingsServer};
use crate::pb::cinema::movies_client::MoviesClient;
use crate::pb::cinema::movies_server::{Movies, MoviesServer};
use crate::pb::cinema::showtimes_client::ShowtimesClient;
use crate::pb::cinema::showtimes_server::{Showtimes, ShowtimesServer};
use crate::pb::cinema::users_client::UsersClient;
use crate::pb::cinema::users_server::{Users, UsersServer};
use crate::pb::cinema::{Booking, BookingList, Movie, MovieRequest, Showtime, ShowtimeRequest, UserRequest};
use crate::{Channel, bind, channel, serve};
use dei_instrumentation::DeiConfig;
use dei_propagator::Fault;
use dei_sfit::{FaultCatalog, FunctionalTest, TestRun, Verdict, test_fn};
use opentelemetry::context::FutureExt as _;
use tonic::{Request, Response, Status};

/// The test user and their single booking.
pub const USER: &str = "chris";
/// The booked movie.
pub const MOVIE: &str = "m-267";
/// The booked showtime.
pub const SHOWTIME: &str = "s-9";
/// The movie's details.
pub const DETAILS: &str = "The Matrix (1999)";

/// Which cinema program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// users retries bookings once in a loop; bookings calls movies.
    Cinema3,
    /// users calls bookings through a helper from two call sites, then movies.
    Cinema9,
    /// bookings calls movies; on a bookings failure users calls movies directly; showtimes for complete bookings.
    Cinema10,
}

impl Variant {
    /// All three.
    pub const ALL: [Variant; 3] = [Variant::Cinema3, Variant::Cinema9, Variant::Cinema10];

    /// The program's name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Cinema3 => "cinema-3",
            Variant::Cinema9 => "cinema-9",
            Variant::Cinema10 => "cinema-10",
        }
    }

    /// The paper's counts: All, No IC, No Stk, No IC & Stk, No Path, IC & Stk (`None` for "-").
    pub fn paper(self) -> [Option<usize>; 5] {
        match self {
            Variant::Cinema3 => [Some(7), Some(4), Some(7), None, None],
            Variant::Cinema9 => [Some(5), Some(5), Some(5), Some(3), None],
            Variant::Cinema10 => [Some(6), Some(6), Some(6), Some(6), Some(5)],
        }
    }
}

/// The paper's fault model: one connection error per RPC, none on the test's own request to users.
pub fn catalog() -> FaultCatalog {
    FaultCatalog {
        rules: Vec::new(),
        protocol_defaults: false,
    }
    .with_rule("cinema.Users/*", vec![])
    .with_rule("*", vec![Fault::Connection])
}

struct MoviesSvc;

#[tonic::async_trait]
impl Movies for MoviesSvc {
    async fn get(&self, request: Request<MovieRequest>) -> Result<Response<Movie>, Status> {
        let movie = request.into_inner().movie;
        if movie != MOVIE {
            return Err(Status::not_found(movie));
        }
        Ok(Response::new(Movie {
            movie,
            details: DETAILS.into(),
        }))
    }
}

struct ShowtimesSvc;

#[tonic::async_trait]
impl Showtimes for ShowtimesSvc {
    async fn get(&self, request: Request<ShowtimeRequest>) -> Result<Response<Showtime>, Status> {
        let showtime = request.into_inner().showtime;
        Ok(Response::new(Showtime {
            showtime,
            when: "20:00".into(),
        }))
    }
}

struct BookingsSvc {
    variant: Variant,
    movies: MoviesClient<Channel>,
}

fn stored_booking() -> Booking {
    Booking {
        movie: MOVIE.into(),
        showtime: SHOWTIME.into(),
        details: String::new(),
        when: String::new(),
    }
}

#[tonic::async_trait]
impl Bookings for BookingsSvc {
    async fn get(&self, request: Request<UserRequest>) -> Result<Response<BookingList>, Status> {
        if request.into_inner().user != USER {
            return Ok(Response::new(BookingList::default()));
        }
        let mut booking = stored_booking();
        match self.variant {
            // the chain: bookings fills in the movie's details, and fails when movies fails
            Variant::Cinema3 | Variant::Cinema10 => {
                let movie = self
                    .movies
                    .clone()
                    .get(MovieRequest {
                        movie: booking.movie.clone(),
                    })
                    .await;
                booking.details = movie
                    .map_err(|s| Status::internal(format!("movies: {}", s.message())))?
                    .into_inner()
                    .details;
            }
            // users fetches the details itself
            Variant::Cinema9 => {}
        }
        Ok(Response::new(BookingList {
            bookings: vec![booking],
        }))
    }
}

struct UsersSvc {
    variant: Variant,
    bookings: BookingsClient<Channel>,
    movies: MoviesClient<Channel>,
    showtimes: ShowtimesClient<Channel>,
}

impl UsersSvc {
    /// cinema-9's helper: one RPC call site, reached from two call sites in `get_bookings`.
    async fn fetch_bookings(&self, user: &str) -> Result<BookingList, Status> {
        Ok(self
            .bookings
            .clone()
            .get(UserRequest { user: user.into() })
            .await?
            .into_inner())
    }

    async fn details_of(&self, movie: &str) -> String {
        match self.movies.clone().get(MovieRequest { movie: movie.into() }).await {
            Ok(m) => m.into_inner().details,
            Err(_) => String::new(), // default: details unavailable
        }
    }
}

#[tonic::async_trait]
impl Users for UsersSvc {
    async fn get_bookings(&self, request: Request<UserRequest>) -> Result<Response<BookingList>, Status> {
        let user = request.into_inner().user;
        let list = match self.variant {
            Variant::Cinema3 => {
                let mut got = None;
                for _attempt in 0..2 {
                    // one call site, the same payload: only the invocation count tells the attempts apart
                    if let Ok(list) = self.bookings.clone().get(UserRequest { user: user.clone() }).await {
                        got = Some(list.into_inner());
                        break;
                    }
                }
                got.ok_or_else(|| Status::unavailable("bookings failed twice"))?
            }
            Variant::Cinema9 => {
                let mut got = self.fetch_bookings(&user).await.ok();
                if got.is_none() {
                    // the failed request is retried later, from another call site of the same helper
                    got = self.fetch_bookings(&user).await.ok();
                }
                let mut list = got.ok_or_else(|| Status::unavailable("bookings unavailable"))?;
                for b in &mut list.bookings {
                    b.details = self.details_of(&b.movie).await;
                }
                list
            }
            Variant::Cinema10 => match self.bookings.clone().get(UserRequest { user: user.clone() }).await {
                Ok(list) => {
                    let mut list = list.into_inner();
                    for b in &mut list.bookings {
                        let when = self
                            .showtimes
                            .clone()
                            .get(ShowtimeRequest {
                                showtime: b.showtime.clone(),
                            })
                            .await;
                        b.when = when.map(|w| w.into_inner().when).unwrap_or_default();
                    }
                    list
                }
                Err(_) => {
                    // default booking list (no showtime), details straight from movies
                    let mut b = Booking {
                        showtime: String::new(),
                        ..stored_booking()
                    };
                    b.details = self.details_of(&b.movie).await;
                    BookingList { bookings: vec![b] }
                }
            },
        };
        Ok(Response::new(list))
    }
}

/// A running cinema: the client the functional test calls users through.
#[derive(Clone)]
pub struct Cinema {
    /// The program.
    pub variant: Variant,
    /// users, through the DEI client layer.
    pub users: UsersClient<Channel>,
}

/// Starts the four services on loopback ports, each with the DEI server layer and DEI client channels.
pub async fn start(variant: Variant, config: &DeiConfig) -> Cinema {
    let (l_movies, a_movies) = bind().await;
    let (l_shows, a_shows) = bind().await;
    let (l_bookings, a_bookings) = bind().await;
    let (l_users, a_users) = bind().await;
    serve(l_movies, config, MoviesServer::new(MoviesSvc));
    serve(l_shows, config, ShowtimesServer::new(ShowtimesSvc));
    serve(
        l_bookings,
        config,
        BookingsServer::new(BookingsSvc {
            variant,
            movies: MoviesClient::new(channel(a_movies, config)),
        }),
    );
    serve(
        l_users,
        config,
        UsersServer::new(UsersSvc {
            variant,
            bookings: BookingsClient::new(channel(a_bookings, config)),
            movies: MoviesClient::new(channel(a_movies, config)),
            showtimes: ShowtimesClient::new(channel(a_shows, config)),
        }),
    );
    Cinema {
        variant,
        users: UsersClient::new(channel(a_users, config)),
    }
}

/// The functional test: fetch the user's bookings with movie details. Conditional assertions: with faults
/// injected, the details may be missing; an error is acceptable only when the program has no fallback left
/// (two failed bookings calls in cinema-3 and cinema-9; never in cinema-10).
pub fn functional_test(cinema: Cinema) -> impl FunctionalTest {
    let name = cinema.variant.name();
    test_fn(name, move |run: TestRun| {
        let mut users = cinema.users.clone();
        let variant = cinema.variant;
        async move {
            let cx = run.context();
            let got = async { users.get_bookings(UserRequest { user: USER.into() }).await }
                .with_context(cx)
                .await;
            let observed = run.observed().await.map_err(|e| e.to_string())?;
            let injected = observed.iter().filter(|r| r.fault.is_some()).count();
            // bookings calls that failed, injected or because movies failed under them
            let bookings_failed = observed
                .iter()
                .filter(|r| r.signature.starts_with("cinema.Bookings/") && !r.outcome.is_ok())
                .count();
            judge(variant, got.map(|r| r.into_inner()), injected, bookings_failed)
        }
    })
}

fn judge(variant: Variant, got: Result<BookingList, Status>, injected: usize, bookings_failed: usize) -> Verdict {
    match got {
        Ok(list) => {
            let [b] = list.bookings.as_slice() else {
                return Err(format!("expected one booking, got {list:?}"));
            };
            if b.movie != MOVIE {
                return Err(format!("wrong movie {:?}", b.movie));
            }
            if b.details == DETAILS || (injected > 0 && b.details.is_empty()) {
                Ok(())
            } else {
                Err(format!("details {:?} with {injected} faults injected", b.details))
            }
        }
        Err(status) => {
            let allowed = match variant {
                Variant::Cinema3 | Variant::Cinema9 => bookings_failed >= 2,
                Variant::Cinema10 => false,
            };
            if allowed {
                Ok(())
            } else {
                Err(format!("users failed: {status} with {injected} faults injected"))
            }
        }
    }
}
