// libFuzzer target: tf.train.Example decoding of arbitrary bytes against a fixed set of
// feature specs (fixed float and int64 shapes, a bytes feature reinterpreted as uint16, and a
// ragged bytes feature). Every outcome is either a decode or a FormatError.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/tf_example.hpp"
#include "sources/tfrecord/example_codec.hpp"

using namespace mpistage;

namespace {

/// Writes every field into buffers sized from the field info (ragged: the size asked for).
class Sink : public BatchSink {
public:
    explicit Sink(const std::vector<FieldInfo>& fields) : fields_(fields), data_(fields.size()) {}
    std::byte* fixed(std::size_t field, std::size_t) override {
        data_[field].assign(static_cast<std::size_t>(fields_[field].sample_bytes), std::byte{0});
        return data_[field].data();
    }
    std::byte* ragged(std::size_t field, std::size_t, std::uint64_t size_bytes) override {
        data_[field].assign(static_cast<std::size_t>(size_bytes), std::byte{0});
        return data_[field].data();
    }

private:
    const std::vector<FieldInfo>& fields_;
    std::vector<std::vector<std::byte>> data_;
};

const ExampleDecoder& decoder() {
    static const ExampleDecoder d(
        {parse_feature_spec("image:bytes/uint16:2x2"), parse_feature_spec("label:int64"),
         parse_feature_spec("box:float:4"), parse_feature_spec("raw:bytes")});
    return d;
}

const ExampleDecoder& single() {
    static const ExampleDecoder d({parse_feature_spec("a:int64:3")});
    return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    for (const ExampleDecoder* d : {&decoder(), &single()}) {
        Sink sink(d->fields());
        try {
            d->decode(data, size, sink, 0, "fuzz");
        } catch (const FormatError&) {
        }
    }
    return 0;
}
