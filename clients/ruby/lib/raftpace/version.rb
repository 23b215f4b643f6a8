# frozen_string_literal: true

module Raftpace
  VERSION = "0.1.0"
end
