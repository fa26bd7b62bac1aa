#include <gtest/gtest.h>

#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"

using namespace mpistage;

TEST(DType, SizesAndNamesRoundTrip) {
    for (DType t : {DType::uint8, DType::int8, DType::uint16, DType::int16, DType::uint32,
                    DType::int32, DType::uint64, DType::int64, DType::float32, DType::float64,
                    DType::boolean}) {
        EXPECT_EQ(parse_dtype(dtype_name(t)), t);
    }
    EXPECT_EQ(dtype_size(DType::uint8), 1u);
    EXPECT_EQ(dtype_size(DType::int16), 2u);
    EXPECT_EQ(dtype_size(DType::float32), 4u);
    EXPECT_EQ(dtype_size(DType::int64), 8u);
    EXPECT_THROW(parse_dtype("complex64"), ConfigError);
}
