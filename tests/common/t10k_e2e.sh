# Sourced by e2e scripts after cli, work and fmnist are set: h5 and tfr name Fashion-MNIST t10k
# converted once into WORK_DIR by `mpistage convert idx` (HDF5 and TFRecord).
h5="$work/t10k.h5"
tfr="$work/t10k.tfrecord"
[ -s "$h5" ] || "$cli" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" \
    "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$h5" >/dev/null
[ -s "$tfr" ] || "$cli" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" \
    "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$tfr" --format tfrecord >/dev/null
