# Walks this Ruby's own control frames through its memory (Fiddle), as the agent reads another
# process's, and prints each frame's label and the class its method entry names (and a C
# method's name, from the symbol table found in libruby's .data):
#   ruby ebpf/ruby-probe/classes.rb
# Offsets are Ruby 3.1's on x86_64 (ebpf/ruby.md, sections 2-4).
require 'fiddle'

# Readable memory, so that a wrong guess is refused rather than read (Fiddle would crash).
READABLE = File.readlines('/proc/self/maps').filter_map do |line|
  range, perms = line.split
  range.split('-').map { |x| x.to_i(16) } if perms.start_with?('r') && !line.include?('[v')
end

def u64(addr)
  raise ArgumentError, 'unreadable' unless READABLE.any? { |lo, hi| addr >= lo && addr + 8 <= hi }
  Fiddle::Pointer.new(addr)[0, 8].unpack1('Q')
end

def element(array, i)
  flags = u64(array)
  return nil unless flags & 0x1f == 0x07
  if flags & 0x2000 != 0
    u64(array + 16 + 8 * i) if i < (flags & 0x18000) >> 15
  elsif i < u64(array + 16)
    u64(u64(array + 32) + 8 * i)
  end
end

def string(addr)
  flags = u64(addr)
  return nil unless flags & 0x1f == 0x05
  if flags & 0x2000 != 0
    Fiddle::Pointer.new(u64(addr + 24))[0, u64(addr + 16)]
  else
    Fiddle::Pointer.new(addr + 16)[0, (flags & 0x7c000) >> 14]
  end
end

# A class's iv_tbl entries, as [id, value].
def ivars(klass)
  table = u64(u64(klass + 24) + 8)
  return [] if table.zero?
  entries = u64(table + 48)
  (u64(table + 32)...u64(table + 40)).filter_map do |i|
    e = entries + i * 24
    [u64(e + 8), u64(e + 16)] unless u64(e) == 0xffff_ffff_ffff_ffff
  end
end

OBJECT = Fiddle.dlwrap(Object)
CLASSPATH = ivars(OBJECT).find { |_, v| string(v) == 'Object' }.first
ATTACHED = ivars(u64(OBJECT + 8)).find { |_, v| v == OBJECT }.first

# The symbol table (ruby_global_symbols.ids), looked for in libruby's .data as the agent does.
def symbol_name(ids, id)
  serial = id > 0xa9 ? id >> 4 : id
  page = element(ids, serial / 512)
  name = page && element(page, (serial % 512) * 2)
  name && string(name)
rescue ArgumentError
  nil
end

DATA_START, DATA_END = File.readlines('/proc/self/maps')
                           .find { |l| l.include?('libruby') && l.split[1].start_with?('rw') }
                           .split.first.split('-').map { |x| x.to_i(16) }
SYMBOLS_AT = (DATA_START...DATA_END - 24).step(8).find do |at|
  last = u64(at)
  ids = u64(at + 16)
  last != 0 && last >> 32 == 0 && ids != 0 && ids % 8 == 0 &&
    symbol_name(ids, CLASSPATH) == '__classpath__' && symbol_name(ids, ATTACHED) == '__attached__'
end
SYMBOLS = SYMBOLS_AT && u64(SYMBOLS_AT + 16)

def path(klass) = ivars(klass).find { |k, _| k == CLASSPATH }&.then { |_, v| string(v) }

def qualifier(me, iseq)
  return nil if me.zero? || me % 8 != 0 || u64(me) & 0x1f != 0x1a || (u64(me) >> 12) & 0xf != 6
  defn = u64(me + 16)
  return nil unless u64(defn) & 0xf == 0 && u64(defn + 8) == iseq
  owner_qualifier(u64(me + 32))
end

def c_method(me)
  return nil if me.zero? || me % 8 != 0 || u64(me) & 0x1f != 0x1a || (u64(me) >> 12) & 0xf != 6
  defn = u64(me + 16)
  return nil unless u64(defn) & 0xf == 1
  "#{owner_qualifier(u64(me + 32))}#{symbol_name(SYMBOLS, u64(defn + 32))}"
rescue ArgumentError # a frame this walk's own calls overwrote
  nil
end

def owner_qualifier(owner)
  if u64(owner) & 0x1000 != 0
    attached = ivars(owner).find { |k, _| k == ATTACHED }&.last
    attached && "#{path(attached)}."
  else
    "#{path(owner)}#"
  end
end

def frames
  ec = u64(Fiddle::Handle::DEFAULT['ruby_current_ec'])
  cfp, stop = u64(ec + 16), u64(ec) + 8 * u64(ec + 8)
  rows = []
  while cfp < stop
    iseq, ep = u64(cfp + 16), u64(cfp + 32)
    if u64(ep) & 0x80 != 0
      rows << [0, 0, nil, u64(ep - 16)]
    elsif iseq != 0 && u64(iseq) & 0x1f == 0x1a
      body = u64(iseq + 16)
      rows << [iseq, u64(body + 176), string(u64(body + 80)), u64(ep - 16)]
    end
    cfp += 64
  end
  rows.each_with_index.map do |(iseq, local, label, me), i|
    next "#{(c_method(me) || '?').ljust(24)} (a C method)" if label.nil?
    home = local == iseq ? rows[i] : rows[i + 1..].find { |r| r[0] == local }
    q = home && qualifier(home[3], home[0])
    "#{label.ljust(24)} #{q ? "class: #{q}" : '(label alone)'}"
  end
end

module Jobs
  module Hot
    def self.build = [1].map { 2.times.map { Worker.new.run }.first }.first
  end
end

class Worker
  def run = frames
end

puts "ids: __classpath__ #{CLASSPATH}, __attached__ #{ATTACHED}; symbol table " \
     "#{SYMBOLS ? format('found in .data at +0x%x', SYMBOLS_AT - DATA_START) : 'not found'}"
puts Jobs::Hot.build
