-- innet INA aggregation header (SPEC section 3; models/headers.py: INA), after UDP port 48864 (0xBEE0).
-- bitmap(32) fanin(8) flags(8: overflow resend collision ack evict result ecn resv) jobseq(32)
-- index(16) priority(8), then int32 values to the end of the UDP payload.
-- Field names are the scapy layer's: ina.bitmap ... ina.values (one per value).
local INA_PORT = 48864
local HEADER = 13

local ina = Proto("ina", "innet INA aggregation header")
local f = ina.fields
f.bitmap = ProtoField.uint32("ina.bitmap", "Worker bitmap", base.HEX)
f.fanin = ProtoField.uint8("ina.fanin", "Fan-in", base.DEC)
f.flags = ProtoField.uint8("ina.flags", "Flags", base.HEX)
local FLAGS = { {"overflow", "Overflow", 0x80}, {"resend", "Resend", 0x40}, {"collision", "Collision", 0x20},
                {"ack", "ACK", 0x10}, {"evict", "Evict", 0x08}, {"result", "Result", 0x04},
                {"ecn", "ECN", 0x02}, {"resv", "Reserved", 0x01} }
for _, flag in ipairs(FLAGS) do
    f[flag[1]] = ProtoField.uint8("ina." .. flag[1], flag[2], base.DEC, nil, flag[3])
end
f.jobseq = ProtoField.uint32("ina.jobseq", "Job and sequence number", base.HEX)
f.index = ProtoField.uint16("ina.index", "Aggregator index", base.DEC)
f.priority = ProtoField.uint8("ina.priority", "Priority", base.DEC)
f.values = ProtoField.int32("ina.values", "Value", base.DEC)
local e_short = ProtoExpert.new("ina.short", "INA header truncated", expert.group.MALFORMED, expert.severity.ERROR)
local e_tail = ProtoExpert.new("ina.tail", "Values do not fill whole int32 words", expert.group.MALFORMED,
                               expert.severity.ERROR)
ina.experts = { e_short, e_tail }

function ina.dissector(tvb, pinfo, tree)
    local length = tvb:len()
    pinfo.cols.protocol = "INA"
    local t = tree:add(ina, tvb())
    if length < HEADER then
        t:add_proto_expert_info(e_short)
        return length
    end
    t:add(f.bitmap, tvb(0, 4))
    t:add(f.fanin, tvb(4, 1))
    local ft = t:add(f.flags, tvb(5, 1))
    local set = {}
    for _, flag in ipairs(FLAGS) do
        ft:add(f[flag[1]], tvb(5, 1))
        if bit.band(tvb(5, 1):uint(), flag[3]) ~= 0 then set[#set + 1] = flag[2] end
    end
    t:add(f.jobseq, tvb(6, 4))
    t:add(f.index, tvb(10, 2))
    t:add(f.priority, tvb(12, 1))
    local n = math.floor((length - HEADER) / 4)
    for i = 0, n - 1 do
        t:add(f.values, tvb(HEADER + 4 * i, 4))
    end
    if (length - HEADER) % 4 ~= 0 then
        t:add_proto_expert_info(e_tail)
    end
    t:append_text(string.format(", jobseq 0x%08x, index %d, bitmap 0x%08x, %d values",
                                tvb(6, 4):uint(), tvb(10, 2):uint(), tvb(0, 4):uint(), n))
    pinfo.cols.info = string.format("INA jobseq=0x%08x index=%d bitmap=0x%08x fanin=%d%s%s", tvb(6, 4):uint(),
                                    tvb(10, 2):uint(), tvb(0, 4):uint(), tvb(4, 1):uint(),
                                    #set > 0 and " [" .. table.concat(set, ",") .. "]" or "",
                                    string.format(" values=%d", n))
    return length
end

DissectorTable.get("udp.port"):add(INA_PORT, ina)
