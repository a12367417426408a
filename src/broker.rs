//! The broker: a registry of topics by name. Cloning is cheap (one `Arc`).
//!
//! Lookups read an immutable snapshot of the name map (arc-swap), so they never wait for a writer;
//! creating and deleting topics take a mutex and publish a new snapshot. No user code runs under it.

use std::{any::Any, collections::HashMap, fmt};

use std::sync::{Arc, Weak};

use crate::{
    config::TopicConfig,
    error::Error,
    sync::{lock, ArcSwap, Mutex},
    topic::Topic,
};

/// The longest topic name accepted, in bytes (as in Kafka).
pub const MAX_NAME_LEN: usize = 249;

trait AnyTopic: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn close(&self);
    fn type_name(&self) -> &'static str;
}

impl<T: Send + Sync + 'static> AnyTopic for Topic<T> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn close(&self) {
        Topic::close(self)
    }
    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }
}

type Registry = HashMap<String, std::sync::Arc<dyn AnyTopic>>;

struct Inner {
    topics: ArcSwap<Registry>,
    write: Mutex<()>,
}

/// A registry of named, typed topics.
///
/// ```
/// use logbus::{Broker, Error, TopicConfig};
/// let broker = Broker::new();
/// let prices = broker.topic::<f64>("prices", TopicConfig::default()).unwrap();
/// // Create-or-get: the same name and config give the same topic.
/// let again = broker.topic::<f64>("prices", TopicConfig::default()).unwrap();
/// prices.publish(1.5).unwrap();
/// assert_eq!(again.stats().partitions[0].end, 1);
/// // Another type under the same name is refused.
/// assert!(matches!(broker.get::<u32>("prices"), Err(Error::TypeMismatch { .. })));
/// ```
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

impl Default for Broker {
    fn default() -> Self {
        Broker::new()
    }
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker")
            .field("topics", &self.topics())
            .finish()
    }
}

/// Checks a topic name: 1 to 249 bytes of `[A-Za-z0-9._-]`, and not `.` or `..`.
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    let bad = |reason| {
        Err(Error::InvalidName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 249 bytes");
    }
    if name == "." || name == ".." {
        return bad("`.` and `..` are reserved");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("only ASCII letters, digits, `.`, `_` and `-` are allowed");
    }
    Ok(())
}

impl Broker {
    /// An empty broker.
    pub fn new() -> Self {
        Broker {
            inner: Arc::new(Inner {
                topics: ArcSwap::from_pointee(HashMap::new()),
                write: Mutex::new(()),
            }),
        }
    }

    /// Creates the topic, or returns it if it exists with the same record type and configuration.
    ///
    /// Errors: [`Error::InvalidName`], [`Error::InvalidConfig`], [`Error::TypeMismatch`],
    /// [`Error::ConfigMismatch`].
    pub fn topic<T: Send + Sync + 'static>(
        &self,
        name: &str,
        config: TopicConfig<T>,
    ) -> Result<Topic<T>, Error> {
        check_name(name)?;
        config.validate()?;
        let _write = lock(&self.inner.write);
        if let Some(existing) = self.inner.topics.load().get(name) {
            let topic = downcast::<T>(name, existing.as_ref())?;
            return if topic.same_config(&config) {
                Ok(topic)
            } else {
                Err(Error::ConfigMismatch(name.to_owned()))
            };
        }
        let topic = Topic::new(name, config)?;
        topic.set_broker(BrokerRef(Arc::downgrade(&self.inner)));
        let mut map = Registry::clone(&self.inner.topics.load());
        map.insert(name.to_owned(), std::sync::Arc::new(topic.clone()));
        self.inner.topics.store(std::sync::Arc::new(map));
        Ok(topic)
    }

    /// The topic with this name and record type.
    ///
    /// Errors: [`Error::UnknownTopic`], [`Error::TypeMismatch`].
    pub fn get<T: Send + Sync + 'static>(&self, name: &str) -> Result<Topic<T>, Error> {
        match self.inner.topics.load().get(name) {
            Some(t) => downcast(name, t.as_ref()),
            None => Err(Error::UnknownTopic(name.to_owned())),
        }
    }

    /// Publishes to the topic named `topic` (round-robin over its partitions). Errors:
    /// [`Error::UnknownTopic`] or [`Error::TypeMismatch`] with the value handed back, or the
    /// publish errors of [`Topic::publish`].
    pub fn publish<T: Send + Sync + 'static>(
        &self,
        topic: &str,
        value: T,
    ) -> Result<crate::Published, crate::PublishToError<T>> {
        match self.get::<T>(topic) {
            Ok(t) => t.publish(value).map_err(crate::PublishToError::Publish),
            Err(e) => Err(crate::PublishToError::Target(e, value)),
        }
    }

    /// The names of every topic, sorted.
    pub fn topics(&self) -> Vec<String> {
        let mut names: Vec<String> = self.inner.topics.load().keys().cloned().collect();
        names.sort();
        names
    }

    /// Closes the topic and removes its name: readers drain what is left, then get `Closed`;
    /// publishers get `Closed`; the name can be used again at once.
    ///
    /// Errors: [`Error::UnknownTopic`].
    pub fn delete(&self, name: &str) -> Result<(), Error> {
        let removed = {
            let _write = lock(&self.inner.write);
            let mut map = Registry::clone(&self.inner.topics.load());
            let removed = map.remove(name);
            if removed.is_some() {
                self.inner.topics.store(std::sync::Arc::new(map));
            }
            removed
        };
        match removed {
            Some(topic) => {
                topic.close();
                Ok(())
            }
            None => Err(Error::UnknownTopic(name.to_owned())),
        }
    }
}

/// A weak reference from a topic to its broker (for dead-letter topics), so that the broker's
/// registry and its topics do not keep each other alive.
#[derive(Clone)]
pub(crate) struct BrokerRef(Weak<Inner>);

impl BrokerRef {
    pub(crate) fn upgrade(&self) -> Option<Broker> {
        self.0.upgrade().map(|inner| Broker { inner })
    }
}

fn downcast<T: Send + Sync + 'static>(name: &str, t: &dyn AnyTopic) -> Result<Topic<T>, Error> {
    match t.as_any().downcast_ref::<Topic<T>>() {
        Some(topic) => Ok(topic.clone()),
        None => Err(Error::TypeMismatch {
            topic: name.to_owned(),
            requested: std::any::type_name::<T>(),
            actual: t.type_name(),
        }),
    }
}
