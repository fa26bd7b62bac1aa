// tf.train.Example wire-format decoding: packed and unpacked lists, bytes reinterpreted as a
// dtype, ragged bytes, and clear errors for missing/mistyped/miscounted features.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/tf_example.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/example_codec.hpp"
#include "sources/tfrecord/framing.hpp"
#include "test_data.hpp"
#include "vec_sink.hpp"

using namespace mpistage;

namespace {

using test::VecSink;

template <class T>
std::vector<T> as(const std::vector<std::byte>& v) {
    std::vector<T> out(v.size() / sizeof(T));
    std::memcpy(out.data(), v.data(), out.size() * sizeof(T));
    return out;
}

std::string error_of(const ExampleDecoder& d, const std::vector<std::uint8_t>& ex) {
    VecSink sink(d.fields());
    try {
        d.decode(ex.data(), ex.size(), sink, 0, "f.tfrecord record at offset 1234");
    } catch (const FormatError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(TfExample, ParseFeatureSpec) {
    auto s = parse_feature_spec("image:bytes/uint8:28x28");
    EXPECT_EQ(s.name, "image");
    EXPECT_EQ(s.kind, FeatureKind::bytes);
    EXPECT_EQ(s.dtype, DType::uint8);
    EXPECT_EQ(s.shape, (std::vector<std::int64_t>{28, 28}));
    EXPECT_FALSE(s.ragged);
    s = parse_feature_spec("label:int64");
    EXPECT_EQ(s.kind, FeatureKind::int64);
    EXPECT_TRUE(s.shape.empty());
    s = parse_feature_spec("x:float:3,4");
    EXPECT_EQ(s.kind, FeatureKind::float32);
    EXPECT_EQ(s.shape, (std::vector<std::int64_t>{3, 4}));
    s = parse_feature_spec("blob:bytes");
    EXPECT_TRUE(s.ragged);
    EXPECT_THROW(parse_feature_spec("nope"), ConfigError);
    EXPECT_THROW(parse_feature_spec("a:complex"), ConfigError);
    EXPECT_THROW(parse_feature_spec("a:int64:3xq"), ConfigError);
    EXPECT_THROW(parse_feature_spec("a:bytes/float32"), ConfigError);
}

TEST(TfExample, RoundTripPackedAndUnpacked) {
    for (bool packed : {true, false}) {
        std::vector<float> xs{1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
        std::vector<std::int64_t> ys{-1, 0, 1, 1LL << 40, -(1LL << 62), 5};
        std::vector<float> raw{0.5f, 0.25f};
        ExampleBuilder b;
        b.add_floats("x", xs, packed)
            .add_int64s("y", ys, packed)
            .add_bytes("raw", raw.data(), raw.size() * 4)
            .add_bytes("blob", "hello", 5)
            .add_int64s("unused", {9});
        const auto ex = b.serialize();
        ExampleDecoder d({parse_feature_spec("x:float:2x3"), parse_feature_spec("y:int64:6"),
                          parse_feature_spec("raw:bytes/float32:2"),
                          parse_feature_spec("blob:bytes")});
        ASSERT_EQ(d.fields().size(), 4u);
        EXPECT_EQ(d.fields()[0].sample_bytes, 24u);
        EXPECT_EQ(d.fields()[1].dtype, DType::int64);
        EXPECT_TRUE(d.fields()[3].ragged);
        VecSink sink(d.fields());
        d.decode(ex.data(), ex.size(), sink, 0, "mem");
        d.decode(ex.data(), ex.size(), sink, 1, "mem");
        auto fx = as<float>(sink.fixed_[0]);
        auto fy = as<std::int64_t>(sink.fixed_[1]);
        auto fr = as<float>(sink.fixed_[2]);
        for (int slot = 0; slot < 2; ++slot) {
            for (std::size_t i = 0; i < 6; ++i) {
                EXPECT_EQ(fx[slot * 6 + i], xs[i]);
                EXPECT_EQ(fy[slot * 6 + i], ys[i]);
            }
            EXPECT_EQ(fr[slot * 2 + 0], 0.5f);
            EXPECT_EQ(fr[slot * 2 + 1], 0.25f);
            ASSERT_EQ(sink.ragged_[3][slot].size(), 5u);
            EXPECT_EQ(std::memcmp(sink.ragged_[3][slot].data(), "hello", 5), 0);
        }
    }
}

TEST(TfExample, ErrorsNameFileOffsetAndFeature) {
    ExampleBuilder b;
    b.add_floats("x", {1.0f, 2.0f}).add_int64s("label", {3}).add_bytes("img", "abc", 3);
    const auto ex = b.serialize();
    auto msg = error_of(ExampleDecoder({parse_feature_spec("missing:int64")}), ex);
    EXPECT_NE(msg.find("f.tfrecord record at offset 1234"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'missing' is missing"), std::string::npos) << msg;
    msg = error_of(ExampleDecoder({parse_feature_spec("x:int64:2")}), ex);
    EXPECT_NE(msg.find("'x' is a float list, declared int64"), std::string::npos) << msg;
    msg = error_of(ExampleDecoder({parse_feature_spec("x:float:3")}), ex);
    EXPECT_NE(msg.find("'x' holds 2 values, expected 3"), std::string::npos) << msg;
    msg = error_of(ExampleDecoder({parse_feature_spec("img:bytes/uint8:4")}), ex);
    EXPECT_NE(msg.find("'img' holds 3 bytes, expected 4"), std::string::npos) << msg;
    // Truncated buffer: malformed, never reads past the end.
    for (std::size_t cut = 1; cut < ex.size(); ++cut) {
        std::vector<std::uint8_t> part(ex.begin(), ex.begin() + static_cast<long>(cut));
        ExampleDecoder d({parse_feature_spec("label:int64")});
        VecSink sink(d.fields());
        try {
            d.decode(part.data(), part.size(), sink, 0, "cut");
        } catch (const FormatError&) {
        }
    }
    EXPECT_THROW(ExampleDecoder({}), ConfigError);
    EXPECT_THROW(ExampleDecoder({parse_feature_spec("a:int64"), parse_feature_spec("a:float")}),
                 ConfigError);
}

TEST(TfExample, RoboflowRecordsDecode) {
    MPISTAGE_REQUIRE_TEST_DATA();
    // Every record of the roboflow file (an independent JS writer) parses as an Example.
    const std::string path = mpistage_test::data_dir() + "/tfrecord/roboflow_37.tfrecord";
    std::ifstream in(path, std::ios::binary);
    std::vector<std::uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
    std::vector<tfrecord::ScanFile> files{tfrecord::memory_file(path, bytes.data(), bytes.size())};
    tfrecord::ScanOptions o;
    o.verify_payloads = true;
    const auto scan = tfrecord::walk_cut(files, 0, bytes.size(), o);
    ASSERT_EQ(scan.records.size(), 37u);
    // The writer stores `id` (int64, the record number) and `payload` (bytes, every byte the
    // record number).
    ExampleDecoder d({parse_feature_spec("id:int64"), parse_feature_spec("payload:bytes")});
    std::size_t ok = 0;
    for (std::size_t k = 0; k < scan.records.size(); ++k) {
        const auto& r = scan.records[k];
        VecSink sink(d.fields());
        try {
            d.decode(bytes.data() + r.offset + 12, r.length, sink, 0, "roboflow");
            EXPECT_EQ(as<std::int64_t>(sink.fixed_[0])[0], static_cast<std::int64_t>(k));
            for (auto b : sink.ragged_[1][0]) {
                ASSERT_EQ(static_cast<unsigned>(b), k & 0xFFu) << "record " << k;
            }
            ++ok;
        } catch (const FormatError& e) {
            ADD_FAILURE() << e.what();
        }
    }
    EXPECT_EQ(ok, 37u);
}
