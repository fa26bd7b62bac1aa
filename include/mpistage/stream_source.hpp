#pragma once
/// @file
/// Stream sources: sets of sub-streams of samples of unknown count (a database cursor, cameras,
/// a generator), each read in order by a `StreamReader`. The interface a stream `Loader`
/// (stream.hpp) stages and `SqliteSource` (sqlite_source.hpp) implements; it lives apart from
/// the loader so that a source depends on nothing above the sources (docs/architecture.md,
/// "Streams").

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpistage/source.hpp"

namespace mpistage {

/// One sample a stream produced: the bytes of each field, in the source's field order.
/// Fixed fields hold exactly `FieldInfo::sample_bytes` bytes; ragged fields any multiple of
/// the element size (empty allowed). `key` is what `StreamSharding::hash` routes by.
struct StreamSample {
    std::vector<std::vector<std::byte>> fields;
    std::uint64_t key = 0;
};

/// Reads one (sub-)stream in order. Used by one thread at a time; makes no MPI calls.
class StreamReader {
public:
    virtual ~StreamReader() = default;
    /// Local: the next sample into `out` (its buffers may be reused); false at the end of the
    /// stream, after which it is not called again. @throws anything; the loader turns it into
    /// the same exception on every rank.
    virtual bool next(StreamSample& out) = 0;
    /// Local: skips up to `count` samples without delivering them (the chunks of other ranks,
    /// or samples a resumed state has consumed). Returns how many were skipped (fewer only at
    /// the end of the stream). The default reads and discards; a cursor can step cheaper.
    virtual std::uint64_t skip(std::uint64_t count);
    /// Local: steps on to the next sample whose key `keep` accepts and delivers it into `out`
    /// (as `next`); the samples before it are skipped. `keep` is called once per sample
    /// stepped over, in stream order, with that sample's key (`StreamSample::key`), and may
    /// keep state (the loader counts positions with it). Returns false when the stream ended
    /// before a sample was accepted. Used by `HashReading::keys`, where every rank steps every
    /// stream and keeps the items it owns. The default reads each sample whole (`next`) and
    /// tests its key; a reader that can tell a key before reading the fields (SQLite: the key
    /// column) reads only the key of a sample `keep` rejects, and should say so with
    /// `StreamSource::keys_first`. @throws what `next` throws.
    virtual bool next_kept(StreamSample& out, const std::function<bool(std::uint64_t key)>& keep);
};

/// A set of sub-streams of samples with the same fields, e.g. one database query (one stream),
/// one stream per camera, or one per rank. Any rank may open any stream (policies `chunk` and
/// `hash` with `HashReading::chunks` open every stream on every rank and skip other ranks'
/// chunks; `source` and `HashReading::sources` open a stream on one rank only).
class StreamSource {
public:
    virtual ~StreamSource() = default;
    /// The fields of every sample (fixed or ragged), in a fixed order; equal on every rank.
    virtual const std::vector<FieldInfo>& fields() const = 0;
    /// Number of sub-streams, equal on every rank (checked collectively).
    virtual std::size_t num_streams() const = 0;
    /// Declared relative cost of stream `s` (e.g. frames per second × seconds) used by
    /// `StreamSharding::source` to balance ranks; 1 for every stream by default (by count).
    virtual double weight(std::size_t s) const;
    /// Local: opens stream `s` at its first sample. @throws anything (agreed by the loader).
    virtual std::unique_ptr<StreamReader> open(std::size_t s) const = 0;
    /// Text identifying the data (query, paths, generator parameters); ranks compare hashes,
    /// and a resumed state must carry the same text.
    virtual std::string fingerprint() const = 0;
    /// Why the streams' order is not the same on every rank and every pass (e.g. a query
    /// ordered by random()); empty (the default) when it is. Reading by position (`chunk`,
    /// `HashReading::chunks`) and resuming are refused for such a source: one reader per
    /// stream (`source`, or `hash` with `HashReading::sources`) still yields each item once.
    virtual std::string unstable_order() const;
    /// True when this source's readers find a sample's key without reading its fields (their
    /// `StreamReader::next_kept` skips a rejected sample at the cost of its key); false (the
    /// default) when a key costs the whole sample. `HashReading::automatic` picks `keys` for
    /// such a source and `chunks` otherwise. Equal on every rank.
    virtual bool keys_first() const;
};

/// Local: a 64-bit identity of a sample's content: FNV-1a 64 over every field's byte count
/// (8 bytes, little-endian) followed by its bytes, in field order. Equal samples have equal
/// hashes; `--verify` of a stream compares these (row identity), not positions.
std::uint64_t sample_content_hash(const StreamSample& sample) noexcept;

/// A `StreamSource` made of the user's callables: `make(s)` returns the generator of stream
/// `s`, a callable filling a `StreamSample` and returning false at the end.
class CallableStreamSource : public StreamSource {
public:
    using Generator = std::function<bool(StreamSample&)>;
    using Factory = std::function<Generator(std::size_t stream)>;
    /// Local. `weights` empty (all 1) or one per stream. @throws ConfigError for a weight
    /// count that differs from `num_streams`, a non-positive weight, or an invalid field.
    CallableStreamSource(std::vector<FieldInfo> fields, std::size_t num_streams, Factory make,
                         std::string fingerprint, std::vector<double> weights = {});
    const std::vector<FieldInfo>& fields() const override { return fields_; }
    std::size_t num_streams() const override { return num_streams_; }
    double weight(std::size_t s) const override;
    std::unique_ptr<StreamReader> open(std::size_t s) const override;
    std::string fingerprint() const override { return fingerprint_; }

private:
    std::vector<FieldInfo> fields_;
    std::size_t num_streams_ = 0;
    Factory make_;
    std::string fingerprint_;
    std::vector<double> weights_;
};

}  // namespace mpistage
