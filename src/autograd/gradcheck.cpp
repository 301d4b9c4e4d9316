#include "mixprec/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "mixprec/autograd/engine.h"
#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::autograd {
namespace {

double projected(const Tensor& out, const Tensor& v) {
  const Tensor o = out.to(DType::F64).contiguous();
  const double* op = o.data<double>();
  const double* vp = v.data<double>();
  double s = 0.0;
  for (int64_t i = 0; i < o.numel(); ++i) s += op[i] * vp[i];
  return s;
}

// Compares each element's analytical gradient with central differences of v . fn().
GradcheckResult compare_with_finite_differences(const std::function<Tensor()>& fn,
                                                const std::vector<Tensor>& leaves, const Tensor& v,
                                                const GradcheckOptions& opt) {
  GradcheckResult result;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const Tensor& x = leaves[i];
    if (!x.defined() || !x.requires_grad()) continue;
    const Tensor analytical = x.grad().defined() ? x.grad().to(DType::F64).contiguous()
                                                 : Tensor::zeros(x.shape(), DType::F64);
    double* xp = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double saved = xp[j];
      double plus, minus;
      {
        NoGrad no_grad;
        xp[j] = saved + opt.eps;
        plus = projected(fn(), v);
        xp[j] = saved - opt.eps;
        minus = projected(fn(), v);
        xp[j] = saved;
      }
      const double numerical = (plus - minus) / (2 * opt.eps);
      const double a = analytical.data<double>()[j];
      const double err = std::fabs(a - numerical);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (result.ok && !(err <= opt.atol + opt.rtol * std::fabs(numerical))) {
        result.ok = false;
        std::ostringstream m;
        m << "input " << i << " element " << j << ": analytical " << a << ", numerical "
          << numerical;
        result.message = m.str();
      }
    }
  }
  return result;
}

// Runs fn once with grad and backpropagates a random projection v of its output.
Tensor backward_projection(const Tensor& out, const GradcheckOptions& opt) {
  MIXPREC_CHECK(out.requires_grad(), "[gradcheck] the function's output does not require grad");
  Generator gen(opt.seed + 12345);
  const Tensor v = Tensor::randn(out.shape(), gen, DType::F64).contiguous();
  out.backward(v.to(out.dtype()));
  return v;
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  for (const Tensor& t : inputs)
    MIXPREC_CHECK(!t.defined() || !t.requires_grad() || t.dtype() == DType::F64,
                  "[gradcheck] inputs that require grad must be f64, got ", dtype_name(t.dtype()));
  // Fresh leaves, so the check owns their .grad().
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      leaves.push_back(t);
      continue;
    }
    Tensor leaf = t.detach().contiguous().clone();
    if (t.requires_grad()) leaf.requires_grad_();
    leaves.push_back(leaf);
  }
  const Tensor v = backward_projection(fn(leaves), opt);
  return compare_with_finite_differences([&] { return fn(leaves); }, leaves, v, opt);
}

GradcheckResult gradcheck_parameters(const std::function<Tensor()>& fn,
                                     const std::vector<Tensor>& params,
                                     const GradcheckOptions& opt) {
  for (const Tensor& p : params)
    MIXPREC_CHECK(p.defined() && p.is_leaf() && p.requires_grad() && p.dtype() == DType::F64 &&
                      p.is_contiguous(),
                  "[gradcheck] parameters must be contiguous f64 leaves that require grad");
  for (const Tensor& p : params) p.zero_grad();
  const Tensor v = backward_projection(fn(), opt);
  return compare_with_finite_differences(fn, params, v, opt);
}

}  // namespace mixprec::autograd
