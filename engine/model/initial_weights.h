// The weights a model starts from: every element of the whole model is a
// function of (seed, parameter name, element index) only, so any sharding
// of the model, and an offloaded optimizer's float32 masters, start from
// the same values.
#ifndef PLATEAU_ENGINE_MODEL_INITIAL_WEIGHTS_H_
#define PLATEAU_ENGINE_MODEL_INITIAL_WEIGHTS_H_

#include <cstdint>

#include "engine/model/parameter_layout.h"

namespace plateau::engine {

// Elements [first, first + count) (row-major, of the whole-model tensor
// info.name) of its initial value into values[0, count): Normal(0,
// info.init_std), or without a std ones (norms) or zeros (an expert bias).
void InitialWeights(uint64_t seed, const ParameterInfo& info, int64_t first,
                    int64_t count, float* values);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_INITIAL_WEIGHTS_H_
